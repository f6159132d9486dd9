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
 *
 * Neither forcing nor fusion may change a gradient: gc_check computes
 * every gradient four times — all lazy; with the intermediates a case
 * marks (gc_mark) and the output forced while the function is built,
 * before kiln_grad; with them forced after kiln_grad recorded the
 * gradients, before they are read; and with fusion switched (off, or on
 * when the program runs under KILN_FUSE=0) — and all must agree to
 * rounding. Needs runtime/ on the include path (rt_set_fusion).
 */
#ifndef KILN_GRAD_CHECK_H
#define KILN_GRAD_CHECK_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/kiln.h"
#include "rt_internal.h"

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

/* How gc_mark treats an intermediate: GC_LAZY (and GC_FUSION_SWITCHED,
 * a lazy run with fusion switched) leaves it alone, GC_FORCE_BEFORE
 * forces it at once, GC_FORCE_AFTER records it so that gc_check forces
 * it after kiln_grad. */
enum { GC_LAZY, GC_FORCE_BEFORE, GC_FORCE_AFTER, GC_FUSION_SWITCHED };
#define GC_MAX_MARKS 32
static int gc_mode = GC_LAZY;
static kiln_tensor *gc_marks[GC_MAX_MARKS];
static int gc_n_marks;

/* Figures over every gc_check of the program: the largest error relative
 * to the tolerance, the largest relative error |got - want| / |want|
 * (where |want| > 1e-3), and the number of checks and of derivatives. */
static double gc_worst_ratio, gc_worst_rel;
static long gc_n_checks, gc_n_derivs;

/* t, an intermediate of a case: forced (or recorded to be) per gc_mode.
 * Borrowed: returns t. */
static inline kiln_tensor *gc_mark(kiln_tensor *t) {
  if (!t || gc_mode == GC_LAZY) return t;
  if (gc_mode == GC_FORCE_BEFORE) {
    if (kiln_realize(t) != KILN_OK) fail_msg("gc_mark: forcing failed: %s", kiln_last_error());
  } else if (gc_n_marks < GC_MAX_MARKS) {
    gc_marks[gc_n_marks++] = t;
  }
  return t;
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

/* kiln_grad of f at inputs in [n] with cotangent c [m], read into got
 * [n][GC_MAX_ELEMS], forcing intermediates per mode. Checks that each
 * gradient has its wrt's sizes and dtype. */
static inline void gc_grads(const char *name, gc_fn f, void *ctx, const gc_input *in, int n, const double *c,
                            int64_t m, int mode, double (*got)[GC_MAX_ELEMS]) {
  kiln_scope_begin();
  if (mode == GC_FUSION_SWITCHED) {
    const char *e = getenv("KILN_FUSE");
    rt_set_fusion(e && strcmp(e, "0") == 0);
  }
  gc_mode = mode == GC_FUSION_SWITCHED ? GC_LAZY : mode;
  gc_n_marks = 0;
  kiln_tensor *x[GC_MAX_IN], *g[GC_MAX_IN];
  gc_tensors(in, n, x);
  kiln_tensor *y = f(x, ctx);
  if (!y) fail_msg("%s: the function failed: %s", name, kiln_last_error());
  assert_int_equal(kiln_numel(y), m);
  if (mode == GC_FORCE_BEFORE && kiln_realize(y) != KILN_OK) fail_msg("%s: %s", name, kiln_last_error());
  if (mode == GC_FORCE_AFTER) gc_mark(y);
  gc_mode = GC_LAZY;
  kiln_tensor *ct = kiln_view(kiln_from_data(KILN_F64, 1, &m, c), kiln_dim(y), kiln_sizes(y));
  int st = kiln_grad(&y, &ct, 1, x, n, g);
  if (st != KILN_OK) fail_msg("%s: kiln_grad failed: %s", name, kiln_last_error());
  for (int i = 0; i < gc_n_marks; i++)
    if (kiln_realize(gc_marks[i]) != KILN_OK) fail_msg("%s: forcing failed: %s", name, kiln_last_error());
  gc_n_marks = 0;
  for (int i = 0; i < n; i++) {
    assert_int_equal(kiln_dtype_of(g[i]), KILN_F64);
    assert_int_equal(kiln_dim(g[i]), in[i].ndim);
    for (int d = 0; d < in[i].ndim; d++) assert_int_equal(kiln_size(g[i], d), in[i].sizes[d]);
    if (kiln_read(g[i], got[i], sizeof got[i]) != KILN_OK) fail_msg("%s: reading grad %d: %s", name, i, kiln_last_error());
  }
  rt_set_fusion(-1);
  kiln_scope_end();
  expect_no_error();
}

/* Whether gc_check also runs the forced and fusion-switched modes: not
 * under KILN_BACKEND=cuda-emu (tests/run_cuda_emu.sh), where every new
 * kernel costs NVRTC and host compiles (about half a second) and these
 * modes check the scheduler, which the CPU run covers, not the
 * backend. */
static inline bool gc_all_modes(void) {
  const char *b = getenv("KILN_BACKEND");
  return !(b && strcmp(b, "cuda-emu") == 0);
}

/* Checks kiln_grad of f at inputs in [n] against central differences.
 * `name` labels failures. Returns the largest error seen relative to the
 * tolerance (≤ 1 passes). Then checks that forcing intermediates before
 * or after kiln_grad gives the same gradients. */
static inline double gc_check(const char *name, gc_fn f, void *ctx, gc_input *in, int n, uint64_t seed) {
  int64_t m;
  kiln_scope_begin();
  {
    kiln_tensor *x[GC_MAX_IN];
    gc_tensors(in, n, x);
    kiln_tensor *y = f(x, ctx);
    if (!y) fail_msg("%s: the function failed: %s", name, kiln_last_error());
    m = kiln_numel(y);
  }
  kiln_scope_end();
  assert_true(m <= GC_MAX_ELEMS);
  double c[GC_MAX_ELEMS];
  for (int64_t i = 0; i < m; i++) c[i] = gc_uniform(&seed, -1, 1);
  static double got[GC_MAX_IN][GC_MAX_ELEMS], again[GC_MAX_IN][GC_MAX_ELEMS];
  gc_grads(name, f, ctx, in, n, c, m, GC_LAZY, got);
  double worst = 0;
  for (int i = 0; i < n; i++) {
    for (int64_t e = 0; e < in[i].n; e++) {
      double keep = in[i].v[e], eps = 1e-6;
      in[i].v[e] = keep + eps;
      double hi = gc_loss(f, ctx, in, n, c, m);
      in[i].v[e] = keep - eps;
      double lo = gc_loss(f, ctx, in, n, c, m);
      in[i].v[e] = keep;
      double want = (hi - lo) / (2 * eps), err = fabs(got[i][e] - want) / (1e-5 + 1e-3 * fabs(want));
      if (err > worst) worst = err;
      if (fabs(want) > 1e-3 && fabs(got[i][e] - want) / fabs(want) > gc_worst_rel)
        gc_worst_rel = fabs(got[i][e] - want) / fabs(want);
      gc_n_derivs++;
      if (!(err <= 1))
        fail_msg("%s: d/dx%d[%lld] is %.9g, central difference %.9g", name, i, (long long)e, got[i][e], want);
    }
  }
  if (worst > gc_worst_ratio) gc_worst_ratio = worst;
  gc_n_checks++;
  static const char *const how[] = {"", "with intermediates forced before kiln_grad",
                                     "with intermediates forced after kiln_grad", "with fusion switched"};
  for (int mode = GC_FORCE_BEFORE; mode <= GC_FUSION_SWITCHED && gc_all_modes(); mode++) {
    gc_grads(name, f, ctx, in, n, c, m, mode, again);
    for (int i = 0; i < n; i++)
      for (int64_t e = 0; e < in[i].n; e++)
        if (!(fabs(again[i][e] - got[i][e]) <= 1e-13 + 1e-11 * fabs(got[i][e])))
          fail_msg("%s: d/dx%d[%lld] is %.17g lazily but %.17g %s", name, i, (long long)e, got[i][e], again[i][e],
                   how[mode]);
  }
  return worst;
}

/* Prints the figures of every gc_check so far. */
static inline void gc_report(const char *program) {
  printf("%s: %ld gradient checks, %ld derivatives; worst error %.3g of the tolerance, worst relative error %.3g\n",
         program, gc_n_checks, gc_n_derivs, gc_worst_ratio, gc_worst_rel);
}

#endif /* KILN_GRAD_CHECK_H */
