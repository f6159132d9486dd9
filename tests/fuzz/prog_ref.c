/*
 * prog_ref.c — the host reference of fuzz_program (see prog_ref.h): an
 * eager interpreter over arrays of pval, written from Torch's documented
 * semantics and Kiln's (docs/semantics.md, kiln.h), not from Kiln's code.
 *
 * Floats are computed in double and rounded to the dtype after every op,
 * which for + - * / and sqrt is exactly what IEEE single precision gives
 * (double has more than twice the bits), so those results are exact. Sums
 * and products may be reordered by Kiln (F64 accumulators, split
 * reductions), transcendentals are accurate to rtol 1e-5 (F32) / 1e-12
 * (F64) (docs/testing.md): both carry an error bound, which later ops
 * propagate (interval arithmetic, one ulp of slack per rounding).
 * Integers wrap in their dtype (two's complement).
 */
#include "prog_ref.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------- model */

void pm_reset(pmodel *m) {
  for (int i = 0; i < m->n; i++) free(m->s[i].x);
  m->n = 0;
}

int pm_new(pmodel *m, kiln_dtype dt, int64_t n) {
  if (m->n == P_MAX_STORES || n > P_MAX_NUMEL) return -1;
  pstore *s = &m->s[m->n];
  s->dt = dt;
  s->n = n;
  s->x = calloc((size_t)(n > 0 ? n : 1), sizeof *s->x);
  if (!s->x) abort();
  return m->n++;
}

int pm_new_view(pmodel *m, kiln_dtype dt, int ndim, const int64_t *sizes, pview *out) {
  int64_t n = 1;
  for (int d = 0; d < ndim; d++) n *= sizes[d];
  *out = pv_contiguous(pm_new(m, dt, n), ndim, sizes);
  return out->st;
}

pview pv_contiguous(int st, int ndim, const int64_t *sizes) {
  pview v = {.st = st, .ndim = ndim};
  int64_t s = 1;
  for (int d = ndim - 1; d >= 0; d--) {
    v.size[d] = sizes[d];
    v.stride[d] = s;
    s *= sizes[d] > 1 ? sizes[d] : 1;
  }
  return v;
}

int64_t pv_numel(const pview *v) {
  int64_t n = 1;
  for (int d = 0; d < v->ndim; d++) n *= v->size[d];
  return n;
}

void pv_offsets(const pview *v, int64_t *out) {
  int64_t n = pv_numel(v), idx[P_MAX_DIMS] = {0};
  for (int64_t p = 0; p < n; p++) {
    int64_t off = v->off;
    for (int d = 0; d < v->ndim; d++) off += idx[d] * v->stride[d];
    out[p] = off;
    for (int d = v->ndim - 1; d >= 0 && ++idx[d] == v->size[d]; d--) idx[d] = 0;
  }
}

bool pv_overlaps(const pview *v) {
  int64_t n = pv_numel(v), offs[P_MAX_NUMEL];
  pv_offsets(v, offs);
  for (int64_t a = 0; a < n; a++)
    for (int64_t b = a + 1; b < n; b++)
      if (offs[a] == offs[b]) return true;
  return false;
}

bool pv_repeats(const pview *v) {
  if (pv_numel(v) == 0) return false;
  for (int d = 0; d < v->ndim; d++)
    if (v->stride[d] == 0 && v->size[d] > 1) return true;
  return false;
}

/* Torch's is_contiguous: size-1 dims do not count, an empty view is. */
bool pv_is_contiguous(const pview *v) {
  int64_t expect = 1;
  for (int d = v->ndim - 1; d >= 0; d--) {
    if (v->size[d] == 0) return true;
    if (v->size[d] == 1) continue;
    if (v->stride[d] != expect) return false;
    expect *= v->size[d];
  }
  return true;
}

kiln_dtype pm_dtype(const pmodel *m, const pview *v) { return m->s[v->st].dt; }

static pval at(const pmodel *m, const pview *v, int64_t off) { return m->s[v->st].x[off]; }

/* ------------------------------------------------------------ dtypes */

bool pd_is_float(kiln_dtype d) { return d == KILN_F32 || d == KILN_F64 || d == KILN_F16 || d == KILN_BF16; }
static bool is_half(kiln_dtype d) { return d == KILN_F16 || d == KILN_BF16; }
static int int_bits(kiln_dtype d) {
  switch (d) {
  case KILN_U8: case KILN_I8: return 8;
  case KILN_I16: return 16;
  case KILN_I32: return 32;
  default: return 64;
  }
}

static const pval unknown = {.f = NAN, .e = INFINITY};

/* torch.promote_types over the dtypes the decoder makes. */
static kiln_dtype promote(kiln_dtype a, kiln_dtype b) {
  if (a == b) return a;
  if (a == KILN_BOOL) return b;
  if (b == KILN_BOOL) return a;
  if (pd_is_float(a) || pd_is_float(b)) {
    if (!pd_is_float(a)) return b;
    if (!pd_is_float(b)) return a;
    return a == KILN_F64 || b == KILN_F64 ? KILN_F64 : KILN_F32; /* F16 with BF16 too */
  }
  if (a == KILN_U8 || b == KILN_U8) { /* with a signed type: one wide enough for both */
    kiln_dtype s = a == KILN_U8 ? b : a;
    return s == KILN_I8 ? KILN_I16 : s;
  }
  return int_bits(a) >= int_bits(b) ? a : b;
}

/* Torch's combine_categories (result_type): a lower-priority kind of
 * operand only counts when its category is higher. -1 is "none". */
static int combine(int higher, int lower) {
  if (higher < 0) return lower;
  if (lower < 0) return higher;
  if (pd_is_float((kiln_dtype)higher)) return higher;
  if (higher == KILN_BOOL || pd_is_float((kiln_dtype)lower)) return promote((kiln_dtype)higher, (kiln_dtype)lower);
  return higher;
}

static bool integral(double s) { return isfinite(s) && s == floor(s) && fabs(s) < 9e18; }

/* Torch's result_type: dimensioned tensors, then 0-d tensors, then
 * Python numbers (an integral double is an int, else the default float). */
static kiln_dtype result_type(const pmodel *m, const poperand *ops, int n) {
  int dim = -1, zero = -1, wrapped = -1;
  for (int i = 0; i < n; i++) {
    int *slot = !ops[i].v ? &wrapped : ops[i].v->ndim > 0 ? &dim : &zero;
    kiln_dtype d = !ops[i].v ? (integral(ops[i].s) ? KILN_I64 : KILN_F32) : pm_dtype(m, ops[i].v);
    *slot = *slot < 0 ? (int)d : (int)promote((kiln_dtype)*slot, d);
  }
  return (kiln_dtype)combine(dim, combine(zero, wrapped));
}

static int64_t wrap(kiln_dtype d, int64_t v) {
  switch (d) {
  case KILN_BOOL: return v != 0;
  case KILN_U8: return (uint8_t)v;
  case KILN_I8: return (int8_t)(uint8_t)v;
  case KILN_I16: return (int16_t)(uint16_t)v;
  case KILN_I32: return (int32_t)(uint32_t)v;
  default: return v;
  }
}

/* A half type's format: significand bits (with the implicit one), the
 * smallest normal exponent, the largest finite value. */
typedef struct half_fmt {
  int bits, emin;
  double max;
} half_fmt;

static half_fmt fmt_of(kiln_dtype d) {
  return d == KILN_F16 ? (half_fmt){11, -14, 65504.0} : (half_fmt){8, -126, 0x1.fep127};
}

/* The spacing of format f's values around |x| (subnormals included). */
static double half_quantum(half_fmt f, double x) {
  int e = 0;
  if (x == 0) return ldexp(1, f.emin - (f.bits - 1));
  frexp(x, &e);
  return ldexp(1, (e - 1 > f.emin ? e - 1 : f.emin) - (f.bits - 1));
}

/* x rounded to nearest (ties to even) in format f; past the largest
 * finite value, infinity. */
static double round_half(half_fmt f, double x) {
  if (!isfinite(x) || x == 0) return x;
  double q = half_quantum(f, fabs(x)), r = nearbyint(x / q) * q; /* x / q is exact */
  return fabs(r) > f.max ? copysign(INFINITY, x) : r;
}

/* Rounded to dtype d; a half type through F32 first, as Kiln and Torch
 * compute them (both roundings are exact-ish: 24 >= 2 * 11 + 2 bits, so
 * the double rounding of an exact result equals the single one). */
static double round_to(kiln_dtype d, double f) {
  if (d == KILN_F32) return (double)(float)f;
  return is_half(d) ? round_half(fmt_of(d), (double)(float)f) : f;
}

static double ulp(kiln_dtype d, double x) {
  x = fabs(x);
  if (!isfinite(x)) return INFINITY;
  if (is_half(d)) return half_quantum(fmt_of(d), x);
  if (d == KILN_F32) return (double)nextafterf((float)x, INFINITY) - (double)(float)x + DBL_MIN;
  return nextafter(x, INFINITY) - x;
}

/* The compute dtype: F16 and BF16 compute in F32. */
static kiln_dtype compute_of(kiln_dtype d) { return is_half(d) ? KILN_F32 : d; }

/* The result r of an exactly rounded op whose exact inputs would give a
 * value within `prop` of r: rounding can then differ by one ulp. */
static pval rounded(kiln_dtype d, double r, double prop) {
  pval o = {.f = round_to(d, r)};
  if (prop > 0) o.e = isfinite(prop) && isfinite(o.f) ? prop * (1 + 1e-12) + 2 * ulp(d, fabs(o.f) + prop) : INFINITY;
  return o;
}

/* A transcendental's result: Kiln's accuracy (rtol) on top of prop. */
static pval approx(kiln_dtype d, double r, double prop) {
  double rtol = d == KILN_F64 ? 1e-12 : 1e-5, tiny = d == KILN_F64 ? DBL_MIN : FLT_MIN;
  pval o = {.f = round_to(d, r)};
  o.e = isfinite(o.f) ? prop + rtol * fabs(o.f) + tiny + ulp(d, o.f) : INFINITY;
  return o;
}

/* The truth value of x (dtype d); -1 when it cannot be told. */
static int truth(pval x, kiln_dtype d) {
  if (!pd_is_float(d)) return x.e != 0 ? -1 : x.i != 0;
  if (isinf(x.e) || (x.e > 0 && fabs(x.f) <= x.e)) return -1;
  return x.f != 0; /* NaN is true */
}

static pval of_bool(int t) { return t < 0 ? unknown : (pval){.i = t, .f = t}; }
static pval of_int(kiln_dtype d, int64_t v) {
  int64_t w = wrap(d, v);
  return (pval){.i = w, .f = (double)w};
}

/* A float value converted to integer dtype `to` (truncation); unknown
 * out of the dtype's range or near a truncation step. */
static pval float_to_int(pval x, kiln_dtype to) {
  if (isinf(x.e) || !isfinite(x.f)) return unknown;
  double t = trunc(x.f);
  if (x.e > 0 && (trunc(x.f - x.e) != t || trunc(x.f + x.e) != t)) return unknown;
  double lo = to == KILN_U8 ? 0 : -ldexp(1, int_bits(to) - 1), hi = ldexp(1, int_bits(to) - (to == KILN_U8 ? 0 : 1));
  if (t < lo || t >= hi) return unknown;
  return of_int(to, (int64_t)t);
}

pval pd_convert(pval x, kiln_dtype from, kiln_dtype to) {
  if (from == to) return x;
  if (to == KILN_BOOL) return of_bool(truth(x, from));
  if (pd_is_float(to)) {
    if (pd_is_float(from) && is_half(to) && x.e == 0 && (double)(float)x.f != x.f && !isnan(x.f))
      return rounded(to, x.f, ulp(to, x.f)); /* F64 -> half directly or through F32: 1 ulp apart */
    if (pd_is_float(from)) return rounded(to, x.f, x.e);
    if (x.e != 0) return unknown;
    if (to == KILN_F64) return (pval){.f = (double)x.i};
    return (pval){.f = round_to(to, (double)(float)x.i)}; /* as Kiln and Torch: one rounding to F32, then to F16/BF16 */
  }
  if (pd_is_float(from)) return float_to_int(x, to);
  if (x.e != 0) return unknown;
  return of_int(to, x.i);
}

pval pd_from_double(double v, kiln_dtype d) { return pd_convert((pval){.f = v}, KILN_F64, d); }

/* A Python number as Kiln records it: an integral value an I64 constant,
 * any other an F64 one; then converted to the compute dtype. */
static pval scalar_in(double s, kiln_dtype ct) {
  if (integral(s)) return pd_convert((pval){.i = (int64_t)s, .f = s}, KILN_I64, ct);
  return pd_convert((pval){.f = s}, KILN_F64, ct);
}

/* The bits of half value v (exactly representable in d). */
static uint16_t half_bits(kiln_dtype d, double v) {
  half_fmt f = fmt_of(d);
  int mbits = f.bits - 1, bias = 1 - f.emin;
  uint16_t sign = signbit(v) ? 0x8000 : 0, inf = (uint16_t)(0x7fff & ~((1u << mbits) - 1));
  if (isnan(v)) return (uint16_t)(sign | inf | 1u << (mbits - 1));
  if (isinf(v)) return sign | inf;
  double a = fabs(v);
  int e = 0;
  frexp(a, &e);
  if (a == 0 || e - 1 < f.emin) return (uint16_t)(sign | (uint16_t)(a / half_quantum(f, a))); /* zero, subnormal */
  return (uint16_t)(sign | (e - 1 + bias) << mbits | (uint16_t)((a / ldexp(1, e - 1) - 1) * (1 << mbits)));
}

static double half_value(kiln_dtype d, uint16_t h) {
  half_fmt f = fmt_of(d);
  int mbits = f.bits - 1, bias = 1 - f.emin, ex = (h & 0x7fff) >> mbits;
  double m = h & ((1u << mbits) - 1), sign = h & 0x8000 ? -1 : 1;
  if (ex == (0x7fff >> mbits)) return m ? NAN : sign * INFINITY;
  if (ex == 0) return sign * m * half_quantum(f, 0);
  return sign * ldexp(1 + m / (1 << mbits), ex - bias);
}

void pd_encode(kiln_dtype d, double v, void *p) {
  if (is_half(d)) {
    uint16_t h = half_bits(d, v);
    memcpy(p, &h, 2);
  } else if (d == KILN_F32) {
    float f = (float)v;
    memcpy(p, &f, 4);
  } else {
    memcpy(p, &v, 8);
  }
}

pval pd_load(kiln_dtype d, const void *p) {
  pval v = {0};
  switch (d) {
  case KILN_F16: case KILN_BF16: { uint16_t h; memcpy(&h, p, 2); v.f = half_value(d, h); break; }
  case KILN_BOOL: case KILN_U8: v.i = *(const uint8_t *)p; break;
  case KILN_I8: v.i = *(const int8_t *)p; break;
  case KILN_I16: { int16_t x; memcpy(&x, p, 2); v.i = x; break; }
  case KILN_I32: { int32_t x; memcpy(&x, p, 4); v.i = x; break; }
  case KILN_I64: memcpy(&v.i, p, 8); break;
  case KILN_F32: { float x; memcpy(&x, p, 4); v.f = x; break; }
  case KILN_F64: memcpy(&v.f, p, 8); break;
  default: abort();
  }
  if (!pd_is_float(d)) v.f = (double)v.i;
  return v;
}

bool pd_matches(kiln_dtype d, pval want, const void *got) {
  if (isinf(want.e)) return true;
  pval g = pd_load(d, got);
  if (!pd_is_float(d)) return g.i == want.i;
  if (isnan(want.f)) return isnan(g.f) || want.e > 0;
  if (isinf(want.f)) return g.f == want.f || want.e > 0;
  return want.e > 0 ? fabs(g.f - want.f) <= want.e : g.f == want.f;
}

bool pd_agree(kiln_dtype d, const void *a, const void *b, double e) {
  if (isinf(e)) return true;
  pval x = pd_load(d, a), y = pd_load(d, b);
  if (!pd_is_float(d)) return x.i == y.i;
  if (isnan(x.f) || isnan(y.f)) return (isnan(x.f) && isnan(y.f)) || e > 0;
  return e > 0 ? fabs(x.f - y.f) <= 2 * e || x.f == y.f : x.f == y.f;
}

/* ------------------------------------------------------- elementwise */

/* Broadcast shape of views vs [n] (NULL entries are scalars); false when
 * the sizes do not broadcast. */
static bool broadcast_shape(const pview *const *vs, int n, int *ndim, int64_t *size) {
  int nd = 0;
  for (int i = 0; i < n; i++)
    if (vs[i] && vs[i]->ndim > nd) nd = vs[i]->ndim;
  for (int d = 0; d < nd; d++) size[d] = 1;
  for (int i = 0; i < n; i++) {
    for (int d = 0; vs[i] && d < vs[i]->ndim; d++) {
      int64_t s = vs[i]->size[d], *o = &size[d + nd - vs[i]->ndim];
      if (s == *o || s == 1) continue;
      if (*o != 1) return false;
      *o = s;
    }
  }
  *ndim = nd;
  return true;
}

/* v seen through the broadcast sizes [ndim] (stride 0 where it repeats). */
static pview broadcast_view(const pview *v, int ndim, const int64_t *size) {
  pview r = {.st = v->st, .ndim = ndim, .off = v->off};
  for (int d = 0; d < ndim; d++) {
    int k = d - (ndim - v->ndim);
    r.size[d] = size[d];
    r.stride[d] = k >= 0 && v->size[k] == size[d] ? v->stride[k] : 0;
  }
  return r;
}

/* The elementwise kernel: inputs already in their compute dtypes. */
typedef pval (*pfn)(const pval *in, kiln_dtype ct, int op, const double *args);

typedef struct pelt {
  int n;               /* operands */
  poperand o[3];
  kiln_dtype in_ct[3]; /* each operand converted to this first */
  kiln_dtype ct, rt;   /* compute and result dtypes */
  pfn f;
  int op;
  double args[2];
} pelt;

static int run_elementwise(pmodel *m, const pelt *e, pview *out) {
  const pview *vs[3];
  for (int i = 0; i < e->n; i++) vs[i] = e->o[i].v;
  int ndim;
  int64_t size[P_MAX_DIMS];
  if (!broadcast_shape(vs, e->n, &ndim, size)) return KILN_ERR_SHAPE;
  if (pm_new_view(m, e->rt, ndim, size, out) < 0) return KILN_OK;
  int64_t numel = pv_numel(out), offs[3][P_MAX_NUMEL];
  for (int i = 0; i < e->n; i++) {
    if (!vs[i]) continue;
    pview b = broadcast_view(vs[i], ndim, size);
    pv_offsets(&b, offs[i]);
  }
  pstore *s = &m->s[out->st];
  for (int64_t p = 0; p < numel; p++) {
    pval in[3];
    for (int i = 0; i < e->n; i++)
      in[i] = vs[i] ? pd_convert(at(m, vs[i], offs[i][p]), pm_dtype(m, vs[i]), e->in_ct[i])
                    : scalar_in(e->o[i].s, e->in_ct[i]);
    s->x[p] = e->f(in, e->ct, e->op, e->args);
    if (is_half(e->rt)) s->x[p] = pd_convert(s->x[p], e->ct, e->rt); /* computed in F32, stored rounded */
  }
  return KILN_OK;
}

/* The dtype operand o is converted to before an op whose operands
 * promote to p: with a half p, a dimensioned tensor of another dtype is
 * rounded to p first (as Torch does), while a 0-d tensor or a scalar
 * enters the F32 computation with its own value (Kiln's choice,
 * docs/testing.md); otherwise p. */
static kiln_dtype operand_dtype(const poperand *o, kiln_dtype p) {
  if (!is_half(p)) return p;
  return o->v && o->v->ndim > 0 ? p : KILN_F32;
}

static pval un_float(pval a, punary op, kiln_dtype ct) {
  double x = a.f, e = a.e, tol = 0;
  if (isinf(e)) return unknown;
  switch (op) {
  case PU_NEG: return rounded(ct, -x, e);
  case PU_ABS: return rounded(ct, x <= 0 ? 0 - x : x, e);
  case PU_SIGN:
    if (isnan(x)) return (pval){.f = x};
    if (e > 0 && fabs(x) <= e) return unknown;
    return (pval){.f = (0 < x) - (x < 0)};
  case PU_RELU: return rounded(ct, isnan(x) ? x : x > 0 ? x : 0.0, e);
  case PU_FLOOR: case PU_CEIL: case PU_ROUND: case PU_TRUNC: {
    double (*g)(double) = op == PU_FLOOR ? floor : op == PU_CEIL ? ceil : op == PU_ROUND ? nearbyint : trunc;
    if (e > 0 && (!isfinite(e) || g(x - e) != g(x) || g(x + e) != g(x))) return unknown;
    return (pval){.f = g(x)};
  }
  case PU_SQRT:
    if (e > 0 && x - e < 0) return unknown;
    return rounded(ct, sqrt(x), e > 0 ? sqrt(x) - sqrt(x - e) : 0);
  case PU_EXP: tol = e > 0 ? exp(x) * expm1(e) : 0; return approx(ct, exp(x), tol);
  case PU_TANH: return approx(ct, tanh(x), e);
  case PU_SIGMOID: return approx(ct, 1 / (1 + exp(-x)), e / 4);
  case PU_RECIPROCAL:
    if (e > 0 && fabs(x) <= e) return unknown;
    return rounded(ct, 1 / x, e > 0 ? e / (fabs(x) * (fabs(x) - e)) : 0);
  default: abort();
  }
}

static pval un_int(pval a, punary op, kiln_dtype ct) {
  if (a.e != 0) return unknown;
  int64_t x = a.i;
  switch (op) {
  case PU_NEG: return of_int(ct, (int64_t)(0 - (uint64_t)x));
  case PU_ABS: return of_int(ct, x < 0 ? (int64_t)(0 - (uint64_t)x) : x);
  case PU_SIGN: return of_int(ct, (x > 0) - (x < 0));
  case PU_RELU: return of_int(ct, x > 0 ? x : 0);
  default: return a; /* floor, ceil, round, trunc of an integer; BOOL abs/sign */
  }
}

static pval un_fn(const pval *in, kiln_dtype ct, int op, const double *args) {
  (void)args;
  if (op == PU_LOGICAL_NOT) {
    int t = truth(in[0], ct);
    return of_bool(t < 0 ? -1 : !t);
  }
  return pd_is_float(ct) ? un_float(in[0], (punary)op, ct) : un_int(in[0], (punary)op, ct);
}

static bool float_only_unary(punary op) { return op >= PU_SQRT && op <= PU_RECIPROCAL; }

int pr_unary(pmodel *m, punary op, const pview *a, pview *out) {
  pelt e = {.n = 1, .o = {{a, 0}}, .f = un_fn, .op = op};
  kiln_dtype d = pm_dtype(m, a);
  if (d == KILN_BOOL && (op == PU_NEG || op == PU_RELU)) return KILN_ERR_DTYPE;
  kiln_dtype p = float_only_unary(op) && !pd_is_float(d) ? KILN_F32 : d;
  e.ct = compute_of(p);
  e.rt = op == PU_LOGICAL_NOT ? KILN_BOOL : p;
  e.in_ct[0] = p;
  return run_elementwise(m, &e, out);
}

static pval cmp_float(pval a, pval b, pbinary op) {
  if ((a.e > 0 || b.e > 0) && !isnan(a.f) && !isnan(b.f) && !(fabs(a.f - b.f) > a.e + b.e)) return unknown;
  if (isinf(a.e) || isinf(b.e)) return unknown;
  double x = a.f, y = b.f;
  switch (op) {
  case PB_EQ: return of_bool(x == y);
  case PB_NE: return of_bool(x != y);
  case PB_LT: return of_bool(x < y);
  case PB_LE: return of_bool(x <= y);
  case PB_GT: return of_bool(x > y);
  default: return of_bool(x >= y);
  }
}

static pval cmp_int(pval a, pval b, pbinary op) {
  if (a.e != 0 || b.e != 0) return unknown;
  int64_t x = a.i, y = b.i;
  switch (op) {
  case PB_EQ: return of_bool(x == y);
  case PB_NE: return of_bool(x != y);
  case PB_LT: return of_bool(x < y);
  case PB_LE: return of_bool(x <= y);
  case PB_GT: return of_bool(x > y);
  default: return of_bool(x >= y);
  }
}

static pval bin_float(pval a, pval b, pbinary op, kiln_dtype ct) {
  double x = a.f, y = b.f, ex = a.e, ey = b.e;
  if (isinf(ex) || isinf(ey)) return unknown;
  switch (op) {
  case PB_ADD: return rounded(ct, x + y, ex + ey);
  case PB_SUB: return rounded(ct, x - y, ex + ey);
  case PB_MUL: return rounded(ct, x * y, fabs(x) * ey + fabs(y) * ex + ex * ey);
  case PB_DIV:
    if (ey > 0 && fabs(y) <= ey) return unknown;
    return rounded(ct, x / y, ex + ey > 0 ? (fabs(x) * ey + fabs(y) * ex) / (fabs(y) * (fabs(y) - ey)) : 0);
  case PB_MAXIMUM: case PB_MINIMUM: {
    double r = isnan(x) || isnan(y) ? NAN : op == PB_MAXIMUM ? fmax(x, y) : fmin(x, y);
    return rounded(ct, r, fmax(ex, ey));
  }
  case PB_FMOD: case PB_REMAINDER: {
    if (ex > 0 || ey > 0) return unknown;
    double r = fmod(x, y);
    if (op == PB_REMAINDER && r != 0 && (r < 0) != (y < 0)) r += y;
    return rounded(ct, r, 0);
  }
  default: abort();
  }
}

static pval bin_int(pval a, pval b, pbinary op, kiln_dtype ct) {
  if (a.e != 0 || b.e != 0) return unknown;
  uint64_t x = (uint64_t)a.i, y = (uint64_t)b.i;
  bool is_bool = ct == KILN_BOOL;
  switch (op) {
  case PB_ADD: return of_int(ct, is_bool ? (int64_t)(x | y) : (int64_t)(x + y));
  case PB_SUB: return of_int(ct, (int64_t)(x - y));
  case PB_MUL: return of_int(ct, is_bool ? (int64_t)(x & y) : (int64_t)(x * y));
  case PB_MAXIMUM: return of_int(ct, a.i > b.i ? a.i : b.i);
  case PB_MINIMUM: return of_int(ct, a.i < b.i ? a.i : b.i);
  case PB_FMOD: case PB_REMAINDER: {
    if (b.i == 0 || b.i == -1) return of_int(ct, 0); /* Kiln: x % 0 is 0; x % -1 is 0 without the trap */
    int64_t r = a.i % b.i;
    if (op == PB_REMAINDER && r != 0 && (r < 0) != (b.i < 0)) r += b.i;
    return of_int(ct, r);
  }
  default: abort();
  }
}

static pval bin_fn(const pval *in, kiln_dtype ct, int op, const double *args) {
  (void)args;
  pbinary o = (pbinary)op;
  if (o >= PB_AND) {
    int x = truth(in[0], ct), y = truth(in[1], ct);
    if (x < 0 || y < 0) return unknown;
    return of_bool(o == PB_AND ? x && y : o == PB_OR ? x || y : x != y);
  }
  if (o >= PB_EQ) return pd_is_float(ct) ? cmp_float(in[0], in[1], o) : cmp_int(in[0], in[1], o);
  return pd_is_float(ct) ? bin_float(in[0], in[1], o, ct) : bin_int(in[0], in[1], o, ct);
}

int pr_binary(pmodel *m, pbinary op, poperand a, poperand b, pview *out) {
  pelt e = {.n = 2, .o = {a, b}, .f = bin_fn, .op = op};
  kiln_dtype p = result_type(m, e.o, 2);
  const pview *vs[2] = {a.v, b.v};
  int ndim;
  int64_t size[P_MAX_DIMS];
  /* both wrong: Kiln reports the sizes (Torch the bool operands) */
  if (!broadcast_shape(vs, 2, &ndim, size)) return KILN_ERR_SHAPE;
  if (p == KILN_BOOL && (op == PB_SUB || op == PB_FMOD || op == PB_REMAINDER)) return KILN_ERR_DTYPE;
  if (op == PB_DIV && !pd_is_float(p)) p = KILN_F32;
  e.ct = compute_of(p);
  e.rt = op >= PB_EQ ? KILN_BOOL : p;
  for (int i = 0; i < 2; i++) e.in_ct[i] = operand_dtype(&e.o[i], p);
  return run_elementwise(m, &e, out);
}

static pval where_fn(const pval *in, kiln_dtype ct, int op, const double *args) {
  (void)ct, (void)op, (void)args;
  int c = truth(in[0], KILN_BOOL);
  return c < 0 ? unknown : c ? in[1] : in[2];
}

int pr_where(pmodel *m, const pview *c, const pview *a, const pview *b, pview *out) {
  kiln_dtype cd = pm_dtype(m, c);
  if (cd != KILN_BOOL && cd != KILN_U8) return KILN_ERR_DTYPE;
  pelt e = {.n = 3, .o = {{c, 0}, {a, 0}, {b, 0}}, .f = where_fn};
  kiln_dtype p = result_type(m, e.o + 1, 2);
  e.ct = compute_of(p), e.rt = p;
  e.in_ct[0] = KILN_BOOL, e.in_ct[1] = operand_dtype(&e.o[1], p), e.in_ct[2] = operand_dtype(&e.o[2], p);
  return run_elementwise(m, &e, out);
}

/* A clamp bound on integer dtype d: truncated toward zero and saturated
 * to d's range [min, max] (kiln.h). */
static int64_t int_bound(double b, int64_t min, int64_t max) {
  if (b <= (double)min) return min;
  if (b >= (double)max) return max; /* (double)INT64_MAX is 2^63 */
  return (int64_t)b;
}

/* clamp on an integer dtype; a NaN bound is no bound. */
static pval clamp_int(pval x, kiln_dtype d, double lo, double hi) {
  if (x.e != 0) return unknown;
  int bits = int_bits(d);
  int64_t max = d == KILN_U8 ? 255 : bits == 64 ? INT64_MAX : (INT64_C(1) << (bits - 1)) - 1;
  int64_t min = d == KILN_U8 ? 0 : -max - 1, v = x.i;
  if (!isnan(lo) && v < int_bound(lo, min, max)) v = int_bound(lo, min, max);
  if (!isnan(hi) && v > int_bound(hi, min, max)) v = int_bound(hi, min, max);
  return of_int(d, v);
}

static pval clamp_fn(const pval *in, kiln_dtype ct, int op, const double *args) {
  (void)op;
  if (!pd_is_float(ct)) return clamp_int(in[0], ct, args[0], args[1]);
  pval x = in[0];
  if (isnan(x.f) || isinf(x.e)) return x;
  if (!isnan(args[0])) x.f = fmax(x.f, round_to(ct, args[0]));
  if (!isnan(args[1])) x.f = fmin(x.f, round_to(ct, args[1]));
  return x;
}

int pr_clamp(pmodel *m, const pview *a, double lo, double hi, pview *out) {
  kiln_dtype d = pm_dtype(m, a);
  if (d == KILN_BOOL) return KILN_ERR_DTYPE;
  pelt e = {.n = 1, .o = {{a, 0}}, .f = clamp_fn, .ct = compute_of(d), .rt = d, .in_ct = {d}, .args = {lo, hi}};
  return run_elementwise(m, &e, out);
}

static pval copy_fn(const pval *in, kiln_dtype ct, int op, const double *args) {
  (void)ct, (void)op, (void)args;
  return in[0];
}

int pr_copy_as(pmodel *m, const pview *a, kiln_dtype d, pview *out) {
  pelt e = {.n = 1, .o = {{a, 0}}, .f = copy_fn, .ct = d, .rt = d, .in_ct = {d}};
  return run_elementwise(m, &e, out);
}

/* -------------------------------------------------------- reductions */

/* Sizes of a reduction's result (keepdim, or without the reduced dims). */
static int reduced_shape(const pview *a, unsigned mask, bool keepdim, int64_t *size) {
  int nd = 0;
  for (int d = 0; d < a->ndim; d++) {
    if (!(mask >> d & 1))
      size[nd++] = a->size[d];
    else if (keepdim)
      size[nd++] = 1;
  }
  return nd;
}

typedef struct pacc {
  kiln_dtype d; /* the input's dtype */
  preduce op;
  pval v;
  double abs_sum, e_sum; /* floats: Σ|x| and Σ e for the sum's bound */
  double log_big, log_small; /* prod: log2 of Π max(|x|, 1) and Π min(|x|, 1) over x != 0 */
  bool zero;                 /* prod: a factor is exactly 0 */
  int64_t n;
  bool unknown;
} pacc;

static void acc_init(pacc *a, preduce op, kiln_dtype d) {
  *a = (pacc){.d = d, .op = op};
  bool fl = pd_is_float(d);
  switch (op) {
  case PR_PROD: a->v = fl ? (pval){.f = 1} : (pval){.i = 1}; break;
  case PR_AMAX: a->v.f = -INFINITY; a->v.i = INT64_MIN; break;
  case PR_AMIN: a->v.f = INFINITY; a->v.i = INT64_MAX; break;
  case PR_ALL: a->v.i = 1; break;
  default: break;
  }
}

static void acc_float(pacc *a, pval x) {
  double *r = &a->v.f;
  switch (a->op) {
  case PR_SUM: case PR_MEAN: *r += x.f; a->abs_sum += fabs(x.f); a->e_sum += x.e; break;
  case PR_PROD: /* error: relative, grown by each factor */
    a->v.e = fabs(*r) * x.e + fabs(x.f) * a->v.e + a->v.e * x.e;
    *r *= x.f;
    if (x.f == 0 && x.e == 0) a->zero = true;
    else if (isfinite(x.f)) a->log_big += log2(fmax(fabs(x.f), 1)), a->log_small += log2(fmin(fabs(x.f), 1));
    break;
  case PR_AMAX: *r = isnan(*r) || isnan(x.f) ? NAN : fmax(*r, x.f); a->v.e = fmax(a->v.e, x.e); break;
  default: *r = isnan(*r) || isnan(x.f) ? NAN : fmin(*r, x.f); a->v.e = fmax(a->v.e, x.e); break;
  }
}

static void acc_add(pacc *a, pval x) {
  a->n++;
  if (isinf(x.e)) a->unknown = true;
  if (a->op == PR_ALL || a->op == PR_ANY) {
    int t = truth(x, a->d);
    if (t < 0) a->unknown = true;
    else a->v.i = a->op == PR_ALL ? a->v.i && t : a->v.i || t;
    return;
  }
  if (pd_is_float(a->d)) return acc_float(a, x);
  int64_t v = x.i; /* BOOL and integers: widened to I64 for sum/prod */
  uint64_t r = (uint64_t)a->v.i;
  switch (a->op) {
  case PR_SUM: a->v.i = (int64_t)(r + (uint64_t)v); break;
  case PR_PROD: a->v.i = (int64_t)(r * (uint64_t)v); break;
  case PR_AMAX: a->v.i = a->v.i > v ? a->v.i : v; break;
  default: a->v.i = a->v.i < v ? a->v.i : v; break;
  }
}

/* A float sum (or mean) in any order: exact when no input is inexact and
 * the result is not finite (inf, NaN: the same in every order); else
 * within n·eps·Σ|x| of the exact sum. */
static pval sum_result(const pacc *a, double eps) {
  pval r = a->v;
  if (!isfinite(r.f)) r.e = a->e_sum > 0 ? INFINITY : 0;
  else r.e = a->abs_sum > 1e300 ? INFINITY : a->e_sum + (double)(a->n + 1) * eps * a->abs_sum;
  if (a->op != PR_MEAN) return r;
  if (a->n == 0) return (pval){.f = NAN}; /* 0 / 0 */
  kiln_dtype cd = compute_of(a->d); /* the sum in the compute dtype, divided there */
  double s = round_to(cd, r.f);
  return rounded(cd, s / (double)a->n, r.e > 0 ? (r.e + ulp(cd, s)) / (double)a->n : 0);
}

/* A float product in any order: unknown when some order could overflow
 * or underflow on the way (partial products are bounded by Π max(|x|,1)
 * and Π min(|x|,1)); else within n·eps relative. */
static pval prod_result(const pacc *a, double eps) {
  pval r = a->v;
  if (a->log_big > 1000 || (a->log_small < -1000 && !a->zero)) return unknown;
  r.e += (double)(a->n + 1) * eps * fabs(r.f);
  if (!isfinite(r.f)) r.e = r.e > 0 ? INFINITY : 0;
  return r;
}

/* The accumulated value in result dtype rt. */
static pval acc_result(const pacc *a, kiln_dtype rt) {
  if (a->unknown) return unknown;
  if (!pd_is_float(a->d) || a->op == PR_ALL || a->op == PR_ANY) return of_int(rt, a->v.i);
  double eps = a->d == KILN_F64 ? 0x1p-53 : a->d == KILN_F32 ? 0x1p-24 : ldexp(1, -fmt_of(a->d).bits);
  pval r = a->v;
  if (a->op == PR_SUM || a->op == PR_MEAN) r = sum_result(a, eps);
  if (a->op == PR_PROD) r = prod_result(a, eps);
  if (isinf(r.e)) return r;
  return r.e > 0 ? rounded(rt, r.f, r.e) : (pval){.f = round_to(rt, r.f)};
}

static kiln_dtype reduce_dtype(preduce op, kiln_dtype d) {
  if (op == PR_ALL || op == PR_ANY) return KILN_BOOL;
  if ((op == PR_SUM || op == PR_PROD) && !pd_is_float(d)) return KILN_I64;
  return d;
}

/* Status of a reduction's dim checks (done by the caller's decoder: mask
 * holds wrapped, distinct dims) and of the dtype and empty dims. */
static int reduce_status(const pmodel *m, preduce op, const pview *a, unsigned mask) {
  if (op == PR_MEAN && !pd_is_float(pm_dtype(m, a))) return KILN_ERR_DTYPE;
  if (op == PR_AMAX || op == PR_AMIN)
    for (int d = 0; d < a->ndim; d++)
      if ((mask >> d & 1) && a->size[d] == 0) return KILN_ERR_SHAPE;
  return KILN_OK;
}

int pr_reduce(pmodel *m, preduce op, const pview *a, unsigned mask, bool keepdim, pview *out) {
  if (mask == 0) mask = (1u << a->ndim) - 1;
  int st = reduce_status(m, op, a, mask);
  if (st != KILN_OK) return st;
  kiln_dtype d = pm_dtype(m, a), rt = reduce_dtype(op, d);
  int64_t size[P_MAX_DIMS], kept[P_MAX_DIMS];
  int nd = reduced_shape(a, mask, keepdim, size);
  reduced_shape(a, mask, true, kept);
  if (pm_new_view(m, rt, nd, size, out) < 0) return KILN_OK;
  pview kv = pv_contiguous(out->st, a->ndim, kept);
  int64_t n = pv_numel(&kv), offs[P_MAX_NUMEL], total = pv_numel(a);
  pacc *acc = malloc(sizeof *acc * (size_t)(n > 0 ? n : 1));
  if (!acc) abort();
  for (int64_t p = 0; p < n; p++) acc_init(&acc[p], op, d);
  pv_offsets(a, offs);
  int64_t idx[P_MAX_DIMS] = {0};
  for (int64_t p = 0; p < total; p++) { /* input element p goes to its kept position */
    int64_t o = 0;
    for (int k = 0; k < a->ndim; k++) o += (mask >> k & 1 ? 0 : idx[k]) * kv.stride[k];
    acc_add(&acc[o], at(m, a, offs[p]));
    for (int k = a->ndim - 1; k >= 0 && ++idx[k] == a->size[k]; k--) idx[k] = 0;
  }
  for (int64_t p = 0; p < n; p++) m->s[out->st].x[p] = acc_result(&acc[p], rt);
  free(acc);
  return KILN_OK;
}

/* argmax/argmin of one slice: the first extreme, NaN the most extreme. */
static pval arg_of(const pmodel *m, const pview *a, int64_t base, int dim, bool max) {
  int64_t size = a->ndim ? a->size[dim] : 1, stride = a->ndim ? a->stride[dim] : 0, best = 0;
  pval b = at(m, a, base);
  for (int64_t i = 0; i < size; i++) {
    pval x = at(m, a, base + i * stride);
    if (x.e != 0) return unknown;
    if (i == 0) continue;
    bool fl = pd_is_float(pm_dtype(m, a));
    bool better = fl ? (!isnan(b.f) && (isnan(x.f) || (max ? x.f > b.f : x.f < b.f)))
                     : (max ? x.i > b.i : x.i < b.i);
    if (better) b = x, best = i;
  }
  return of_int(KILN_I64, best);
}

int pr_argmax(pmodel *m, bool max, const pview *a, int dim, bool keepdim, pview *out) {
  if (a->ndim > 0 && a->size[dim] == 0) return KILN_ERR_SHAPE;
  unsigned mask = a->ndim ? 1u << dim : 0;
  int64_t size[P_MAX_DIMS];
  int nd = reduced_shape(a, mask, keepdim, size);
  if (pm_new_view(m, KILN_I64, nd, size, out) < 0) return KILN_OK;
  pview others = *a; /* a with the reduced dim of size 1: one element per slice */
  if (a->ndim) others.size[dim] = 1;
  int64_t n = pv_numel(&others), offs[P_MAX_NUMEL];
  pv_offsets(&others, offs);
  for (int64_t p = 0; p < n; p++) m->s[out->st].x[p] = arg_of(m, a, offs[p], dim, max);
  return KILN_OK;
}

/* ------------------------------------------------------------ indexing */

/* The index values of idx (I64/I32, exact) into v [numel]. */
static int index_values(const pmodel *m, const pview *idx, int64_t *v) {
  kiln_dtype d = pm_dtype(m, idx);
  if (d != KILN_I64 && d != KILN_I32) return KILN_ERR_DTYPE;
  int64_t n = pv_numel(idx), offs[P_MAX_NUMEL];
  pv_offsets(idx, offs);
  for (int64_t i = 0; i < n; i++) v[i] = at(m, idx, offs[i]).i;
  return KILN_OK;
}

/* Every index in [0, size) (or [-size, size) when wrap), then wrapped. */
static int check_range(int64_t *v, int64_t n, int64_t size, bool wrap_neg) {
  for (int64_t i = 0; i < n; i++) {
    if (wrap_neg && v[i] < 0 && v[i] >= -size) v[i] += size;
    if (v[i] < 0 || v[i] >= size) return KILN_ERR_INDEX;
  }
  return KILN_OK;
}

int pr_index_select(pmodel *m, const pview *t, int dim, const pview *idx, pview *out) {
  if (t->ndim == 0) return KILN_ERR_SHAPE;
  if (idx->ndim > 1) return KILN_ERR_SHAPE;
  int64_t v[P_MAX_NUMEL], n = pv_numel(idx);
  int st = index_values(m, idx, v);
  if (st == KILN_OK) st = check_range(v, n, t->size[dim], false);
  if (st != KILN_OK) return st;
  int64_t size[P_MAX_DIMS];
  memcpy(size, t->size, sizeof size);
  size[dim] = n;
  int64_t pos[P_MAX_DIMS] = {0};
  if (pm_new_view(m, pm_dtype(m, t), t->ndim, size, out) < 0) return KILN_OK;
  int64_t total = pv_numel(out);
  for (int64_t p = 0; p < total; p++) { /* out is contiguous: element p */
    int64_t o = t->off;
    for (int k = 0; k < t->ndim; k++) o += (k == dim ? v[pos[k]] : pos[k]) * t->stride[k];
    m->s[out->st].x[p] = at(m, t, o);
    for (int k = t->ndim - 1; k >= 0 && ++pos[k] == size[k]; k--) pos[k] = 0;
  }
  return KILN_OK;
}

int pr_gather(pmodel *m, const pview *t, int dim, const pview *idx, pview *out) {
  if (t->ndim == 0 || idx->ndim != t->ndim) return KILN_ERR_SHAPE;
  for (int k = 0; k < t->ndim; k++)
    if (k != dim && idx->size[k] > t->size[k]) return KILN_ERR_SHAPE;
  int64_t v[P_MAX_NUMEL], n = pv_numel(idx);
  int st = index_values(m, idx, v);
  if (st == KILN_OK) st = check_range(v, n, t->size[dim], false);
  if (st != KILN_OK) return st;
  if (pm_new_view(m, pm_dtype(m, t), idx->ndim, idx->size, out) < 0) return KILN_OK;
  int64_t pos[P_MAX_DIMS] = {0};
  for (int64_t p = 0; p < n; p++) {
    int64_t o = t->off;
    for (int k = 0; k < t->ndim; k++) o += (k == dim ? v[p] : pos[k]) * t->stride[k];
    m->s[out->st].x[p] = at(m, t, o);
    for (int k = t->ndim - 1; k >= 0 && ++pos[k] == idx->size[k]; k--) pos[k] = 0;
  }
  return KILN_OK;
}

/* ----------------------------------------------------- in-place writes */

int pr_fill(pmodel *m, const pview *t, double value) {
  int64_t n = pv_numel(t), offs[P_MAX_NUMEL];
  pv_offsets(t, offs);
  pval v = pd_from_double(value, pm_dtype(m, t));
  for (int64_t p = 0; p < n; p++) m->s[t->st].x[offs[p]] = v;
  return KILN_OK;
}

int pr_copy(pmodel *m, const pview *dst, const pview *src) {
  if (pv_repeats(dst)) return KILN_ERR_ARG;
  int64_t n = pv_numel(dst), doffs[P_MAX_NUMEL], soffs[P_MAX_NUMEL];
  const pview *vs[2] = {dst, src};
  int ndim;
  int64_t size[P_MAX_DIMS];
  if (broadcast_shape(vs, 2, &ndim, size) && ndim == dst->ndim && !memcmp(size, dst->size, sizeof *size * (size_t)ndim)) {
    pview b = broadcast_view(src, ndim, size);
    pv_offsets(&b, soffs);
  } else if (pv_numel(src) == n) {
    pv_offsets(src, soffs); /* the same elements in row-major order */
  } else {
    return KILN_ERR_SHAPE;
  }
  pv_offsets(dst, doffs);
  pval tmp[P_MAX_NUMEL]; /* the source as it is when the copy is recorded */
  for (int64_t p = 0; p < n; p++) tmp[p] = pd_convert(at(m, src, soffs[p]), pm_dtype(m, src), pm_dtype(m, dst));
  for (int64_t p = 0; p < n; p++) m->s[dst->st].x[doffs[p]] = tmp[p];
  return KILN_OK;
}

/* The checks index_fill_/index_copy_/index_add_ share (Kiln's order). */
static int index_target_status(const pview *t, const pview *idx) {
  if (t->ndim == 0) return KILN_ERR_SHAPE;
  if (pv_repeats(t)) return KILN_ERR_ARG;
  if (idx->ndim > 1) return KILN_ERR_SHAPE;
  return KILN_OK;
}

/* Storage offset of t's element at pos with dim's coordinate j. */
static int64_t offset_at(const pview *t, const int64_t *pos, int dim, int64_t j) {
  int64_t o = t->off;
  for (int k = 0; k < t->ndim; k++) o += (k == dim ? j : pos[k]) * t->stride[k];
  return o;
}

int pr_index_fill(pmodel *m, const pview *t, int dim, const pview *idx, double value) {
  int st = index_target_status(t, idx);
  int64_t v[P_MAX_NUMEL], n = pv_numel(idx);
  if (st == KILN_OK) st = index_values(m, idx, v);
  if (st == KILN_OK) st = check_range(v, n, t->size[dim], true);
  if (st != KILN_OK) return st;
  pview slice = *t; /* every position of the other dims */
  slice.size[dim] = 1;
  int64_t count = pv_numel(&slice), pos[P_MAX_DIMS] = {0};
  pval x = pd_from_double(value, pm_dtype(m, t));
  for (int64_t p = 0; p < count; p++) {
    for (int64_t i = 0; i < n; i++) m->s[t->st].x[offset_at(t, pos, dim, v[i])] = x;
    for (int k = t->ndim - 1; k >= 0 && ++pos[k] == slice.size[k]; k--) pos[k] = 0;
  }
  return KILN_OK;
}

/* t[..., idx[i], ...] = (or +=) src[..., i, ...], i in order. */
static void put_slices(pmodel *m, const pview *t, int dim, const int64_t *v, const pval *src, const pview *sv,
                       bool add) {
  kiln_dtype d = pm_dtype(m, t);
  int64_t total = pv_numel(sv), pos[P_MAX_DIMS] = {0};
  for (int64_t p = 0; p < total; p++) { /* src element p, row-major: its index is pos[dim] */
    pval *dst = &m->s[t->st].x[offset_at(t, pos, dim, v[pos[dim]])];
    if (!add) *dst = src[p];
    else if (pd_is_float(d)) *dst = rounded(d, dst->f + src[p].f, dst->e + src[p].e);
    else *dst = dst->e != 0 || src[p].e != 0 ? unknown : of_int(d, d == KILN_BOOL ? (dst->i | src[p].i) : (int64_t)((uint64_t)dst->i + (uint64_t)src[p].i));
    for (int k = sv->ndim - 1; k >= 0 && ++pos[k] == sv->size[k]; k--) pos[k] = 0;
  }
}

int pr_index_put(pmodel *m, const pview *t, int dim, const pview *idx, const pview *src, bool add) {
  int st = index_target_status(t, idx);
  int64_t v[P_MAX_NUMEL], n = pv_numel(idx);
  if (st != KILN_OK) return st;
  bool ok = src->ndim == t->ndim;
  for (int k = 0; ok && k < t->ndim; k++) ok = src->size[k] == (k == dim ? n : t->size[k]);
  if (!ok) return KILN_ERR_SHAPE;
  st = index_values(m, idx, v);
  if (st == KILN_OK) st = check_range(v, n, t->size[dim], false);
  if (st != KILN_OK) return st;
  int64_t count = pv_numel(src), offs[P_MAX_NUMEL];
  pval vals[P_MAX_NUMEL];
  pv_offsets(src, offs);
  for (int64_t p = 0; p < count; p++) vals[p] = pd_convert(at(m, src, offs[p]), pm_dtype(m, src), pm_dtype(m, t));
  put_slices(m, t, dim, v, vals, src, add);
  return KILN_OK;
}

int pr_masked_fill(pmodel *m, const pview *t, const pview *mask, double value) {
  kiln_dtype md = pm_dtype(m, mask);
  if (md != KILN_BOOL && md != KILN_U8) return KILN_ERR_DTYPE;
  if (pv_repeats(t)) return KILN_ERR_ARG;
  int64_t n = pv_numel(t), toffs[P_MAX_NUMEL], moffs[P_MAX_NUMEL];
  const pview *vs[2] = {t, mask};
  int ndim;
  int64_t size[P_MAX_DIMS];
  if (broadcast_shape(vs, 2, &ndim, size) && ndim == t->ndim && !memcmp(size, t->size, sizeof *size * (size_t)ndim)) {
    pview b = broadcast_view(mask, ndim, size);
    pv_offsets(&b, moffs);
  } else if (pv_numel(mask) == n) {
    pv_offsets(mask, moffs);
  } else {
    return KILN_ERR_SHAPE;
  }
  pv_offsets(t, toffs);
  pval x = pd_from_double(value, pm_dtype(m, t));
  for (int64_t p = 0; p < n; p++) {
    int sel = truth(at(m, mask, moffs[p]), md);
    pval *dst = &m->s[t->st].x[toffs[p]];
    if (sel < 0) *dst = unknown;
    else if (sel) *dst = x;
  }
  return KILN_OK;
}

/* Storage offset of t's element at index (negatives wrap), or -1. */
static int64_t element_offset(const pview *t, const int64_t *index) {
  int64_t o = t->off;
  for (int d = 0; d < t->ndim; d++) {
    int64_t i = index[d];
    if (i < -t->size[d] || i >= t->size[d]) return -1;
    o += (i < 0 ? i + t->size[d] : i) * t->stride[d];
  }
  return o;
}

int pr_set(pmodel *m, const pview *t, const int64_t *index, double value) {
  int64_t o = element_offset(t, index);
  if (o < 0) return KILN_ERR_INDEX;
  m->s[t->st].x[o] = pd_from_double(value, pm_dtype(m, t));
  return KILN_OK;
}

int pr_get(const pmodel *m, const pview *t, const int64_t *index, pval *out) {
  int64_t o = element_offset(t, index);
  if (o < 0) return KILN_ERR_INDEX;
  *out = at(m, t, o);
  return KILN_OK;
}
