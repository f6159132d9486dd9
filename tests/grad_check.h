/*
 * grad_check.h — torch.autograd.gradcheck for the C tests: kiln_grad of a
 * function of F64 inputs against central differences (eps 1e-6, atol
 * 1e-5, rtol 1e-3), with a random cotangent (a sum loss hides zero
 * gradients, e.g. of softmax). Include after cmocka.h and test_util.h.
 *
 * A case is a function building one output from its inputs; the inputs
 * are contiguous F64 tensors made from host arrays, and the function
 * applies whatever views it tests (narrow, transpose, expand, ...), so
 * gradients flow back through them to the base tensors.
 */
#ifndef KILN_GRAD_CHECK_H
#define KILN_GRAD_CHECK_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "kiln/kiln.h"

#define GC_MAX_IN 4
#define GC_MAX_ELEMS 512

typedef kiln_tensor *(*gc_fn)(kiln_tensor *const *x, void *ctx);

typedef struct gc_input {
  int ndim;
  int64_t sizes[KILN_MAX_DIMS];
  double v[GC_MAX_ELEMS];
  int64_t n;
} gc_input;

static inline uint64_t gc_next(uint64_t *s) {
  *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
  return *s >> 11;
}
static inline double gc_uniform(uint64_t *s, double lo, double hi) {
  return lo + (hi - lo) * (double)gc_next(s) / (double)(1ULL << 53);
}

/* An input of sizes [ndim] with values uniform in [lo, hi). */
static inline gc_input gc_in(uint64_t *seed, int ndim, const int64_t *sizes, double lo, double hi) {
  gc_input in = {.ndim = ndim, .n = 1};
  for (int d = 0; d < ndim; d++) in.sizes[d] = sizes[d], in.n *= sizes[d];
  for (int64_t i = 0; i < in.n; i++) in.v[i] = gc_uniform(seed, lo, hi);
  return in;
}

static inline void gc_tensors(const gc_input *in, int n, kiln_tensor **x) {
  for (int i = 0; i < n; i++) x[i] = kiln_from_data(KILN_F64, in[i].ndim, in[i].sizes, in[i].v);
}

/* sum(f(x) * c) for host inputs, forced. */
static inline double gc_loss(gc_fn f, void *ctx, const gc_input *in, int n, const double *c, int64_t m) {
  kiln_scope_begin();
  kiln_tensor *x[GC_MAX_IN];
  gc_tensors(in, n, x);
  kiln_tensor *y = f(x, ctx);
  double out = NAN;
  if (y && kiln_numel(y) == m) {
    kiln_tensor *ct = kiln_view(kiln_from_data(KILN_F64, 1, &m, c), kiln_dim(y), kiln_sizes(y));
    kiln_item_f64(kiln_sum(kiln_mul(kiln_to_dtype(y, KILN_F64), ct), 0, NULL, false), &out);
  }
  kiln_scope_end();
  return out;
}

/* Checks kiln_grad of f at inputs in [n] against central differences.
 * `name` labels failures. Returns the largest error seen relative to the
 * tolerance (≤ 1 passes). */
static inline double gc_check(const char *name, gc_fn f, void *ctx, gc_input *in, int n, uint64_t seed) {
  kiln_scope_begin();
  kiln_tensor *x[GC_MAX_IN], *g[GC_MAX_IN];
  gc_tensors(in, n, x);
  kiln_tensor *y = f(x, ctx);
  if (!y) fail_msg("%s: the function failed: %s", name, kiln_last_error());
  int64_t m = kiln_numel(y);
  assert_true(m <= GC_MAX_ELEMS);
  double c[GC_MAX_ELEMS];
  for (int64_t i = 0; i < m; i++) c[i] = gc_uniform(&seed, -1, 1);
  kiln_tensor *ct = kiln_view(kiln_from_data(KILN_F64, 1, &m, c), kiln_dim(y), kiln_sizes(y));
  int st = kiln_grad(&y, &ct, 1, x, n, g);
  if (st != KILN_OK) fail_msg("%s: kiln_grad failed: %s", name, kiln_last_error());
  double worst = 0;
  for (int i = 0; i < n; i++) {
    double got[GC_MAX_ELEMS];
    assert_int_equal(kiln_read(g[i], got, sizeof got), KILN_OK);
    for (int64_t e = 0; e < in[i].n; e++) {
      double keep = in[i].v[e], eps = 1e-6;
      in[i].v[e] = keep + eps;
      double hi = gc_loss(f, ctx, in, n, c, m);
      in[i].v[e] = keep - eps;
      double lo = gc_loss(f, ctx, in, n, c, m);
      in[i].v[e] = keep;
      double want = (hi - lo) / (2 * eps), err = fabs(got[e] - want) / (1e-5 + 1e-3 * fabs(want));
      if (err > worst) worst = err;
      if (err > 1)
        fail_msg("%s: d/dx%d[%lld] is %.9g, central difference %.9g", name, i, (long long)e, got[e], want);
    }
  }
  kiln_scope_end();
  expect_no_error();
  return worst;
}

#endif /* KILN_GRAD_CHECK_H */
