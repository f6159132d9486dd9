/*
 * test_grad_ops.c — a gradient check (tests/grad_check.h: central
 * differences in F64, random cotangent) for every differentiable op of
 * kiln.h's math: elementwise ops (unary, binary, with a scalar, where,
 * clamp), broadcasting, casts between float dtypes, every reduction with
 * dims and keepdim, cumsum/cumprod, softmax, log_softmax, layer_norm and
 * the matrix products. Views, indexing, joins and in-place writes are in
 * tests/test_grad_views.c.
 *
 * Inputs are read through views inside each case (narrow with an offset,
 * transposes, stride-0 expands, broadcasts), so every gradient also goes
 * back through a view's adjoint; each check also compares the gradients
 * with intermediates forced before and after kiln_grad (grad_check.h).
 * Input values stay away from the points where an op is not
 * differentiable (|x| near 0 for abs, jumps of fmod, bounds of clamp).
 * tests/CMakeLists.txt runs this program again with KILN_FUSE=0.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "test_util.h"
#include "grad_check.h"

#define M gc_mark

/* Moves every value within `margin` of point p to distance margin (and
 * a bit) from it, on its side. */
static void avoid(gc_input *in, double p, double margin) {
  for (int64_t i = 0; i < in->n; i++) {
    double d = in->v[i] - p;
    if (fabs(d) < margin) in->v[i] = p + (d < 0 ? -1 : 1) * (margin + fabs(d));
  }
}

/* x [4, 6] read as t(narrow(x, 1, 1, 4)): [4, 4], offset 1, strides
 * [1, 6]. */
static kiln_tensor *twist(kiln_tensor *x) { return kiln_t(kiln_narrow(x, 1, 1, 4)); }
/* Column 5 of x [4, 6] expanded to [4, 4] (stride 0 along dim 1). */
static kiln_tensor *bcast_col(kiln_tensor *x) {
  return kiln_expand(kiln_narrow(x, 1, 5, 1), 2, (int64_t[]){4, 4});
}

/* --------------------------------------------------------------- unary */

typedef kiln_tensor *(*unary_fn)(kiln_tensor *);

typedef struct unary_case {
  const char *name;
  unary_fn f;
  double lo, hi;  /* input range */
  int n_avoid;    /* points to keep away from, by 0.15 */
  double bad[3];
} unary_case;

static kiln_tensor *unary(kiln_tensor *const *x, void *ctx) {
  unary_fn f = ((const unary_case *)ctx)->f;
  kiln_tensor *a = M(f(twist(x[0])));
  return kiln_add(a, kiln_mul_scalar(f(bcast_col(x[0])), 0.5));
}

static kiln_tensor *clamp_mid(kiln_tensor *t) { return kiln_clamp(t, -0.5, 0.75); }
static kiln_tensor *clamp_lo(kiln_tensor *t) { return kiln_clamp(t, -0.5, NAN); }
static kiln_tensor *clamp_hi(kiln_tensor *t) { return kiln_clamp(t, -INFINITY, 0.25); }
static kiln_tensor *add_s(kiln_tensor *t) { return kiln_add_scalar(t, 1.5); }
static kiln_tensor *sub_s(kiln_tensor *t) { return kiln_sub_scalar(t, 0.25); }
static kiln_tensor *mul_s(kiln_tensor *t) { return kiln_mul_scalar(t, -3); }
static kiln_tensor *div_s(kiln_tensor *t) { return kiln_div_scalar(t, 0.7); }
static kiln_tensor *pow_s(kiln_tensor *t) { return kiln_pow_scalar(t, 2.5); }
static kiln_tensor *pow_s3(kiln_tensor *t) { return kiln_pow_scalar(t, 3); }
static kiln_tensor *pow_neg(kiln_tensor *t) { return kiln_pow_scalar(t, -1.5); }
static kiln_tensor *max_s(kiln_tensor *t) { return kiln_maximum_scalar(t, 0.1); }
static kiln_tensor *min_s(kiln_tensor *t) { return kiln_minimum_scalar(t, 0.1); }
/* Ops with a zero derivative pass nothing: x + floor(x) has derivative 1. */
static kiln_tensor *plus_sign(kiln_tensor *t) { return kiln_add(t, kiln_sign(t)); }
static kiln_tensor *plus_floor(kiln_tensor *t) { return kiln_add(t, kiln_floor(t)); }
static kiln_tensor *plus_ceil(kiln_tensor *t) { return kiln_add(t, kiln_ceil(t)); }
static kiln_tensor *plus_round(kiln_tensor *t) { return kiln_add(t, kiln_round(t)); }
static kiln_tensor *plus_trunc(kiln_tensor *t) { return kiln_add(t, kiln_trunc(t)); }
/* A comparison's result, cast to float, is a constant. */
static kiln_tensor *times_gt(kiln_tensor *t) { return kiln_mul(t, kiln_to_dtype(kiln_gt_scalar(t, 0), KILN_F64)); }
static kiln_tensor *plus_argmax(kiln_tensor *t) {
  return kiln_add(t, kiln_to_dtype(kiln_argmax(t, 1, true), KILN_F64));
}

static const unary_case unary_cases[] = {
    {"neg", kiln_neg, -2, 2, 0, {0}},
    {"abs", kiln_abs, -2, 2, 1, {0}},
    {"exp", kiln_exp, -2, 2, 0, {0}},
    {"exp2", kiln_exp2, -2, 2, 0, {0}},
    {"log", kiln_log, 0.3, 3, 0, {0}},
    {"log2", kiln_log2, 0.3, 3, 0, {0}},
    {"log1p", kiln_log1p, -0.6, 2, 0, {0}},
    {"expm1", kiln_expm1, -2, 2, 0, {0}},
    {"sqrt", kiln_sqrt, 0.3, 3, 0, {0}},
    {"rsqrt", kiln_rsqrt, 0.3, 3, 0, {0}},
    {"reciprocal", kiln_reciprocal, -2, 2, 1, {0}},
    {"sin", kiln_sin, -3, 3, 0, {0}},
    {"cos", kiln_cos, -3, 3, 0, {0}},
    {"tan", kiln_tan, -1.2, 1.2, 0, {0}},
    {"tanh", kiln_tanh, -2, 2, 0, {0}},
    {"sigmoid", kiln_sigmoid, -4, 4, 0, {0}},
    {"relu", kiln_relu, -2, 2, 1, {0}},
    {"gelu", kiln_gelu, -3, 3, 0, {0}},
    {"silu", kiln_silu, -3, 3, 0, {0}},
    {"erf", kiln_erf, -2, 2, 0, {0}},
    {"clamp", clamp_mid, -2, 2, 2, {-0.5, 0.75}},
    {"clamp lo only", clamp_lo, -2, 2, 1, {-0.5}},
    {"clamp hi only", clamp_hi, -2, 2, 1, {0.25}},
    {"add_scalar", add_s, -2, 2, 0, {0}},
    {"sub_scalar", sub_s, -2, 2, 0, {0}},
    {"mul_scalar", mul_s, -2, 2, 0, {0}},
    {"div_scalar", div_s, -2, 2, 0, {0}},
    {"pow_scalar 2.5", pow_s, 0.3, 2, 0, {0}},
    {"pow_scalar 3", pow_s3, -2, 2, 0, {0}},
    {"pow_scalar -1.5", pow_neg, 0.3, 2, 0, {0}},
    {"maximum_scalar", max_s, -2, 2, 1, {0.1}},
    {"minimum_scalar", min_s, -2, 2, 1, {0.1}},
    {"sign (zero derivative)", plus_sign, -2, 2, 1, {0}},
    {"floor (zero derivative)", plus_floor, -1.8, 1.8, 3, {-1, 0, 1}},
    {"ceil (zero derivative)", plus_ceil, -1.8, 1.8, 3, {-1, 0, 1}},
    {"round (zero derivative)", plus_round, -1.4, 1.4, 2, {-0.5, 0.5}},
    {"trunc (zero derivative)", plus_trunc, -1.8, 1.8, 3, {-1, 0, 1}},
    {"comparison (constant)", times_gt, -2, 2, 1, {0}},
    {"argmax (constant)", plus_argmax, -2, 2, 0, {0}},
};

static void unary_ops(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof unary_cases / sizeof *unary_cases; i++) {
    const unary_case *c = &unary_cases[i];
    uint64_t seed = 100 + i;
    gc_input in = gc_in(&seed, 2, (int64_t[]){4, 6}, c->lo, c->hi);
    for (int k = 0; k < c->n_avoid; k++) avoid(&in, c->bad[k], 0.15);
    gc_check(c->name, unary, (void *)c, &in, 1, seed);
  }
}

/* -------------------------------------------------------------- binary */

typedef kiln_tensor *(*binary_fn)(kiln_tensor *, kiln_tensor *);

/* fix(a, b) moves a into the region the op is checked on. */
typedef struct binary_case {
  const char *name;
  binary_fn f;
  double alo, ahi, blo, bhi;
  void (*fix)(double *a, double b);
} binary_case;

/* f(A, B): A = t(narrow(x0 [7, 4], 0, 1, 6)) [4, 6], offset 4, strides
 * [1, 4]; B = x1 [6] broadcast over the rows (stride 0). Element (i, j)
 * reads x0[(1 + j) * 4 + i] and x1[j]; row 0 of x0 is not read. */
static kiln_tensor *binary(kiln_tensor *const *x, void *ctx) {
  binary_fn f = ((const binary_case *)ctx)->f;
  kiln_tensor *a = kiln_t(kiln_narrow(x[0], 0, 1, 6));
  return f(M(a), x[1]);
}

static void fix_away(double *a, double b) {
  if (fabs(*a - b) < 0.1) *a = b + (*a < b ? -0.1 : 0.1) - (b - *a);
}
/* a = b * (k + u), u in [0.15, 0.85]: a / b stays away from integers
 * (fmod and remainder jump there). */
static void fix_mod(double *a, double b) {
  double q = *a / b, k = floor(q), u = q - k;
  *a = b * (k + 0.15 + 0.7 * u);
}
static void fix_nonzero(double *a, double b) {
  (void)b;
  if (fabs(*a) < 0.2) *a = *a < 0 ? -0.2 + *a : 0.2 + *a;
}

static const binary_case binary_cases[] = {
    {"add", kiln_add, -2, 2, -2, 2, NULL},
    {"sub", kiln_sub, -2, 2, -2, 2, NULL},
    {"mul", kiln_mul, -2, 2, -2, 2, NULL},
    {"div", kiln_div, -2, 2, 0.5, 2, NULL},
    {"pow", kiln_pow, 0.3, 2, -2, 2, NULL},
    {"maximum", kiln_maximum, -2, 2, -2, 2, fix_away},
    {"minimum", kiln_minimum, -2, 2, -2, 2, fix_away},
    {"fmod", kiln_fmod, -5, 5, 0.6, 2, fix_mod},
    {"fmod by negative", kiln_fmod, -5, 5, -2, -0.6, fix_mod},
    {"remainder", kiln_remainder, -5, 5, 0.6, 2, fix_mod},
    {"remainder by negative", kiln_remainder, -5, 5, -2, -0.6, fix_mod},
    {"atan2", kiln_atan2, -2, 2, -2, 2, fix_nonzero},
};

static void binary_ops(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof binary_cases / sizeof *binary_cases; i++) {
    const binary_case *c = &binary_cases[i];
    uint64_t seed = 200 + i;
    gc_input in[2] = {gc_in(&seed, 2, (int64_t[]){7, 4}, c->alo, c->ahi), gc_in(&seed, 1, (int64_t[]){6}, c->blo, c->bhi)};
    if (c->fix)
      for (int r = 1; r < 7; r++)
        for (int col = 0; col < 4; col++) c->fix(&in[0].v[r * 4 + col], in[1].v[r - 1]);
    if (c->f == kiln_atan2) avoid(&in[1], 0, 0.2);
    gc_check(c->name, binary, (void *)c, in, 2, seed);
  }
}

/* where(x0 > 0, A, B): no gradient to the condition; A and B broadcast. */
static kiln_tensor *where_case(kiln_tensor *const *x, void *ctx) {
  (void)ctx;
  kiln_tensor *a = twist(x[0]);                   /* [4, 4] */
  kiln_tensor *b = kiln_unsqueeze(x[1], 1);       /* [4, 1] */
  kiln_tensor *c = kiln_gt_scalar(a, 0);
  kiln_tensor *w = kiln_where(c, kiln_mul(a, a), kiln_exp(b));
  kiln_tensor *s = kiln_scalar(KILN_F64, 0.5);
  return kiln_add(w, kiln_where(c, s, kiln_mul(b, x[2])));  /* x[2] 0-d */
}

static void where_op(void **state) {
  (void)state;
  uint64_t seed = 300;
  gc_input in[3] = {gc_in(&seed, 2, (int64_t[]){4, 6}, -2, 2), gc_in(&seed, 1, (int64_t[]){4}, -1, 1),
                    gc_in(&seed, 0, NULL, -1, 1)};
  avoid(&in[0], 0, 0.1);
  gc_check("where", where_case, NULL, in, 3, seed);
}

/* -------------------------------------------------------- broadcasting */

/* [2, 1, 4] + [3, 1] + 0-d, times a [4] and a stride-0 expand of a
 * narrow; sums go over every broadcast dim. */
static kiln_tensor *broadcast_case(kiln_tensor *const *x, void *ctx) {
  (void)ctx;
  kiln_tensor *a = kiln_add(x[0], x[1]);                   /* [2, 3, 4] */
  a = kiln_add(M(a), x[2]);                                /* + 0-d */
  kiln_tensor *row = kiln_narrow(x[3], 0, 1, 4);           /* [4], offset 1 */
  kiln_tensor *e = kiln_expand(kiln_unsqueeze(kiln_select(x[1], 1, 0), 0), 2, (int64_t[]){2, 3});
  return kiln_mul(kiln_mul(a, row), kiln_unsqueeze(e, 2));
}

static void broadcasting(void **state) {
  (void)state;
  uint64_t seed = 400;
  gc_input in[4] = {gc_in(&seed, 3, (int64_t[]){2, 1, 4}, -1, 1), gc_in(&seed, 2, (int64_t[]){3, 1}, -1, 1),
                    gc_in(&seed, 0, NULL, -1, 1), gc_in(&seed, 1, (int64_t[]){6}, -1, 1)};
  gc_check("broadcasting", broadcast_case, NULL, in, 4, seed);
}

/* ----------------------------------------------------------------- casts */

/* F64 -> F32 -> ops -> F64, with an F32 * F64 promotion in between. The
 * values are small (~1e-3) so that F32 rounding stays far below what a
 * central difference with eps 1e-6 can see. */
static kiln_tensor *cast_case(kiln_tensor *const *x, void *ctx) {
  (void)ctx;
  kiln_tensor *a = kiln_to_dtype(twist(x[0]), KILN_F32);
  kiln_tensor *b = kiln_mul(M(a), kiln_to_dtype(bcast_col(x[0]), KILN_F32));  /* F32 */
  kiln_tensor *c = kiln_add(b, kiln_mul_scalar(x[1], 0.001));                  /* F32 + F64 [4] -> F64 */
  return kiln_to_dtype(kiln_mul_scalar(kiln_to_dtype(c, KILN_F32), 3), KILN_F64);
}

static void casts(void **state) {
  (void)state;
  uint64_t seed = 500;
  gc_input in[2] = {gc_in(&seed, 2, (int64_t[]){4, 6}, 1e-3, 2e-3), gc_in(&seed, 1, (int64_t[]){4}, -1e-3, 1e-3)};
  gc_check("casts F64 <-> F32", cast_case, NULL, in, 2, seed);
}

/* Casts to F16 and BF16 round the cotangent to the narrow dtype, as
 * Torch does; with values they represent exactly, the gradient is exact. */
static void casts_half_exact(void **state) {
  (void)state;
  kiln_dtype dts[2] = {KILN_F16, KILN_BF16};
  for (int i = 0; i < 2; i++) {
    kiln_scope_begin();
    kiln_tensor *x = kiln_from_data(KILN_F64, 1, (int64_t[]){3}, (double[]){1, 2, 3}), *g;
    kiln_tensor *h = kiln_to_dtype(x, dts[i]);
    kiln_tensor *y = kiln_to_dtype(kiln_mul(h, h), KILN_F32);
    kiln_tensor *c = kiln_from_data(KILN_F64, 1, (int64_t[]){3}, (double[]){0.5, -0.25, 2});
    assert_int_equal(kiln_grad(&y, &c, 1, &x, 1, &g), KILN_OK);
    assert_int_equal(kiln_dtype_of(g), KILN_F64);
    expect_values_tol(g, (double[]){1, -1, 12}, 3, 0);
    kiln_scope_end();
  }
  expect_no_error();
}

/* ------------------------------------------------------------ reductions */

typedef kiln_tensor *(*reduce_fn)(kiln_tensor *t, int ndims, const int *dims, bool keepdim);

typedef struct red_case {
  const char *name;
  reduce_fn f;
  int kind; /* 0: f; 1: var (correction); 2: std; 3: norm (p) */
  double arg;
  int ndims;
  int dims[3];
  bool keepdim;
} red_case;

/* x [3, 4, 5] read as permute(x, [2, 0, 1]): [5, 3, 4]. */
static kiln_tensor *reduce_case(kiln_tensor *const *x, void *ctx) {
  const red_case *c = ctx;
  kiln_tensor *t = kiln_permute(x[0], 3, (int[]){2, 0, 1});
  switch (c->kind) {
  case 1: return kiln_var(t, c->ndims, c->dims, (int)c->arg, c->keepdim);
  case 2: return kiln_std(t, c->ndims, c->dims, (int)c->arg, c->keepdim);
  case 3: return kiln_norm(t, c->arg, c->ndims, c->dims, c->keepdim);
  default: return c->f(t, c->ndims, c->dims, c->keepdim);
  }
}

static void run_reductions(const char *name, reduce_fn f, int kind, double arg, double lo, double hi, bool away,
                           uint64_t seed) {
  static const struct {
    int ndims, dims[3];
    bool keepdim;
  } sets[] = {
      {0, {0}, false}, {1, {0}, false}, {1, {-1}, true}, {2, {0, 2}, false}, {2, {1, 2}, true}, {3, {0, 1, 2}, true},
  };
  for (size_t s = 0; s < sizeof sets / sizeof *sets; s++) {
    red_case c = {name, f, kind, arg, sets[s].ndims, {sets[s].dims[0], sets[s].dims[1], sets[s].dims[2]},
                  sets[s].keepdim};
    char label[128];
    snprintf(label, sizeof label, "%s over %d dims (first %d)%s", name, c.ndims, c.dims[0],
             c.keepdim ? " keepdim" : "");
    uint64_t sd = seed + s;
    gc_input in = gc_in(&sd, 3, (int64_t[]){3, 4, 5}, lo, hi);
    if (away) avoid(&in, 0, 0.2);
    gc_check(label, reduce_case, &c, &in, 1, sd);
  }
}

static void reductions(void **state) {
  (void)state;
  run_reductions("sum", kiln_sum, 0, 0, -2, 2, false, 1000);
  run_reductions("mean", kiln_mean, 0, 0, -2, 2, false, 1100);
  run_reductions("prod", kiln_prod, 0, 0, 0.8, 1.25, false, 1200);
  run_reductions("amax", kiln_amax, 0, 0, -2, 2, false, 1300);
  run_reductions("amin", kiln_amin, 0, 0, -2, 2, false, 1400);
  run_reductions("logsumexp", kiln_logsumexp, 0, 0, -2, 2, false, 1500);
}

static void stats(void **state) {
  (void)state;
  run_reductions("var correction 1", NULL, 1, 1, -2, 2, false, 2000);
  run_reductions("var correction 0", NULL, 1, 0, -2, 2, false, 2100);
  run_reductions("std correction 1", NULL, 2, 1, -2, 2, false, 2200);
  run_reductions("std correction 0", NULL, 2, 0, -2, 2, false, 2300);
}

static void norms(void **state) {
  (void)state;
  const double ps[] = {1, 2, 3, 0.5, -1.5, INFINITY, -INFINITY, 0};
  for (size_t i = 0; i < sizeof ps / sizeof *ps; i++) {
    char name[32];
    snprintf(name, sizeof name, "norm p=%g", ps[i]);
    run_reductions(name, NULL, 3, ps[i], -2, 2, true, 3000 + 100 * i);
  }
}

/* prod with zeros: d/dx_i is the product of the others (nonzero for the
 * zero element when it is alone in its slice; zero everywhere in a
 * slice with two zeros). */
static kiln_tensor *prod_rows(kiln_tensor *const *x, void *ctx) {
  int dim = *(const int *)ctx;
  return kiln_prod(kiln_t(x[0]), 1, &dim, false);
}

static void prod_with_zeros(void **state) {
  (void)state;
  uint64_t seed = 4000;
  for (int dim = 0; dim < 2; dim++) {
    gc_input in = gc_in(&seed, 2, (int64_t[]){4, 5}, 0.5, 1.5);
    in.v[2] = 0;             /* one zero in row 0 / column 2 */
    in.v[6] = in.v[8] = 0;   /* two zeros in row 1 */
    in.v[15] = 0;
    gc_check(dim ? "prod with zeros, dim 1" : "prod with zeros, dim 0", prod_rows, &dim, &in, 1, seed);
  }
  /* exact: d prod([2, 0, 3]) = [0, 6, 0]; d prod([0, 0, 3]) = 0 */
  kiln_scope_begin();
  kiln_tensor *x = kiln_from_data(KILN_F64, 2, (int64_t[]){2, 3}, (double[]){2, 0, 3, 0, 0, 3}), *g;
  kiln_tensor *y = kiln_sum(kiln_prod(x, 1, (int[]){1}, false), 0, NULL, false);
  assert_int_equal(kiln_grad(&y, NULL, 1, &x, 1, &g), KILN_OK);
  expect_values_tol(g, (double[]){0, 6, 0, 0, 0, 0}, 6, 0);
  kiln_scope_end();
  expect_no_error();
}

/* amax/amin ties share the gradient evenly (Torch's amax); maximum and
 * minimum of equal values give half to each side. Exact values. */
static void extremum_ties(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = kiln_from_data(KILN_F64, 2, (int64_t[]){2, 4}, (double[]){1, 3, 3, 2, 5, 5, 5, 5}), *g[2];
  kiln_tensor *c = kiln_from_data(KILN_F64, 1, (int64_t[]){2}, (double[]){0.5, -1.5});
  kiln_tensor *y = kiln_amax(x, 1, (int[]){1}, false);
  assert_int_equal(kiln_grad(&y, &c, 1, &x, 1, g), KILN_OK);
  expect_values_tol(g[0], (double[]){0, 0.25, 0.25, 0, -0.375, -0.375, -0.375, -0.375}, 8, 0);
  kiln_tensor *z = kiln_amin(x, 0, NULL, false); /* min 1 once */
  assert_int_equal(kiln_grad(&z, NULL, 1, &x, 1, g), KILN_OK);
  expect_values_tol(g[0], (double[]){1, 0, 0, 0, 0, 0, 0, 0}, 8, 0);
  kiln_tensor *w = kiln_amax(x, 0, NULL, true); /* four 5s share 1 */
  assert_int_equal(kiln_grad(&w, NULL, 1, &x, 1, g), KILN_OK);
  expect_values_tol(g[0], (double[]){0, 0, 0, 0, 0.25, 0.25, 0.25, 0.25}, 8, 0);
  kiln_tensor *a = kiln_from_data(KILN_F64, 1, (int64_t[]){3}, (double[]){1, 2, 3});
  kiln_tensor *b = kiln_from_data(KILN_F64, 1, (int64_t[]){3}, (double[]){1, 5, 0});
  kiln_tensor *ab[2] = {a, b};
  kiln_tensor *mx = kiln_sum(kiln_maximum(a, b), 0, NULL, false);
  assert_int_equal(kiln_grad(&mx, NULL, 1, ab, 2, g), KILN_OK);
  expect_values_tol(g[0], (double[]){0.5, 0, 1}, 3, 0);
  expect_values_tol(g[1], (double[]){0.5, 1, 0}, 3, 0);
  kiln_tensor *mn = kiln_sum(kiln_minimum(a, b), 0, NULL, false);
  assert_int_equal(kiln_grad(&mn, NULL, 1, ab, 2, g), KILN_OK);
  expect_values_tol(g[0], (double[]){0.5, 1, 0}, 3, 0);
  expect_values_tol(g[1], (double[]){0.5, 0, 1}, 3, 0);
  /* the tie of amax along a dim of a transposed view */
  kiln_tensor *tx = kiln_t(x);
  kiln_tensor *u = kiln_sum(kiln_amax(tx, 1, (int[]){0}, false), 0, NULL, false);
  assert_int_equal(kiln_grad(&u, NULL, 1, &x, 1, g), KILN_OK);
  expect_values_tol(g[0], (double[]){0, 0.5, 0.5, 0, 0.25, 0.25, 0.25, 0.25}, 8, 0);
  kiln_scope_end();
  expect_no_error();
}

/* ----------------------------------------------------------------- scans */

typedef struct scan_case {
  kiln_tensor *(*f)(kiln_tensor *, int);
  int dim;
} scan_case;

static kiln_tensor *scan_case_fn(kiln_tensor *const *x, void *ctx) {
  const scan_case *c = ctx;
  return c->f(kiln_transpose(kiln_narrow(x[0], 0, 1, 3), 0, 1), c->dim); /* [5, 3] */
}

static void scans(void **state) {
  (void)state;
  uint64_t seed = 5000;
  for (int dim = -1; dim < 2; dim++) {
    scan_case cs = {kiln_cumsum, dim}, cp = {kiln_cumprod, dim};
    gc_input in = gc_in(&seed, 2, (int64_t[]){4, 5}, -1.5, 1.5);
    gc_check("cumsum", scan_case_fn, &cs, &in, 1, seed);
    gc_check("cumprod", scan_case_fn, &cp, &in, 1, seed);
    /* zeros in rows 1-3 (the ones read): row 1 has two, rows 2 and 3
     * one; column 0 has two, columns 1 and 2 one */
    in.v[5] = in.v[7] = in.v[11] = in.v[15] = 0;
    gc_check("cumprod with zeros", scan_case_fn, &cp, &in, 1, seed);
  }
}

/* cumprod over a longer dim. */
static kiln_tensor *cumprod_long(kiln_tensor *const *x, void *ctx) {
  (void)ctx;
  return kiln_cumprod(x[0], 0);
}

static void cumprod_exact_products(void **state) {
  (void)state;
  /* d cumprod([2, 0, 3, 4]) . [1, 1, 1, 1] = [1, 2 + 6 + 24, 0, 0] */
  kiln_scope_begin();
  kiln_tensor *x = kiln_from_data(KILN_F64, 1, (int64_t[]){4}, (double[]){2, 0, 3, 4}), *g;
  kiln_tensor *y = kiln_sum(kiln_cumprod(x, 0), 0, NULL, false);
  assert_int_equal(kiln_grad(&y, NULL, 1, &x, 1, &g), KILN_OK);
  expect_values_tol(g, (double[]){1, 32, 0, 0}, 4, 0);
  kiln_scope_end();
  uint64_t seed = 5100;
  gc_input in = gc_in(&seed, 1, (int64_t[]){40}, 0.9, 1.1);
  gc_check("cumprod [40]", cumprod_long, NULL, &in, 1, seed);
  expect_no_error();
}

/* ---------------------------------------------------- softmax, layer norm */

typedef struct nn_case {
  int dim, log;
} nn_case;

static kiln_tensor *softmax_case(kiln_tensor *const *x, void *ctx) {
  const nn_case *c = ctx;
  kiln_tensor *t = kiln_permute(kiln_narrow(x[0], 2, 1, 4), 3, (int[]){1, 2, 0}); /* [3, 4, 2] */
  return c->log ? kiln_log_softmax(t, c->dim) : kiln_softmax(t, c->dim);
}

static void softmaxes(void **state) {
  (void)state;
  uint64_t seed = 6000;
  for (int log = 0; log < 2; log++)
    for (int dim = -1; dim < 3; dim++) {
      nn_case c = {dim, log};
      gc_input in = gc_in(&seed, 3, (int64_t[]){2, 3, 5}, -3, 3);
      gc_check(log ? "log_softmax" : "softmax", softmax_case, &c, &in, 1, seed);
    }
}

typedef struct ln_case {
  int nd;
  bool weight, bias;
} ln_case;

/* layer_norm over the last nd dims of t(x) [.., 4, 3] with weight/bias
 * (the weight read through a transpose, the bias through an expand). */
static kiln_tensor *layer_norm_case(kiln_tensor *const *x, void *ctx) {
  const ln_case *c = ctx;
  kiln_tensor *t = kiln_transpose(x[0], 1, 2); /* [2, 4, 3] */
  kiln_tensor *w = NULL, *b = NULL;
  if (c->nd == 1) {
    if (c->weight) w = kiln_select(x[1], 0, 1);                          /* [3] of [4, 3] */
    if (c->bias) b = kiln_expand(x[2], 1, (int64_t[]){3});               /* [1] -> [3] */
  } else {
    if (c->weight) w = kiln_t(kiln_narrow(x[1], 0, 0, 3));                /* [4, 3] */
    if (c->bias) b = kiln_expand(x[2], 2, (int64_t[]){4, 3});
  }
  return kiln_layer_norm(t, c->nd, w, b, 1e-5);
}

static void layer_norms(void **state) {
  (void)state;
  static const ln_case cases[] = {{1, true, true}, {1, false, false}, {1, true, false}, {2, true, true}, {2, false, true}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    uint64_t seed = 7000 + i;
    gc_input in[3] = {gc_in(&seed, 3, (int64_t[]){2, 3, 4}, -2, 2), gc_in(&seed, 2, (int64_t[]){4, 4}, 0.5, 1.5),
                      gc_in(&seed, 1, (int64_t[]){1}, -1, 1)};
    if (cases[i].nd == 1) in[1] = gc_in(&seed, 2, (int64_t[]){4, 3}, 0.5, 1.5);
    gc_check("layer_norm", layer_norm_case, (void *)&cases[i], in, 3, seed);
  }
}

/* --------------------------------------------------------------- products */

typedef struct mm_case {
  const char *name;
  int kind;
} mm_case;

static kiln_tensor *mm_case_fn(kiln_tensor *const *x, void *ctx) {
  const mm_case *c = ctx;
  kiln_tensor *a = x[0], *b = x[1];
  switch (c->kind) {
  case 0: return kiln_matmul(a, b);                                          /* [2, 3, 4] @ [4, 5] */
  case 1: return kiln_matmul(kiln_transpose(a, 1, 2), b);                    /* [2, 4, 3]^T @ [4, 5] */
  case 2: return kiln_matmul(a, kiln_transpose(b, 1, 2));                     /* [2, 1, 3, 4] @ [3, 4, 2] */
  case 3: return kiln_matmul(a, b);                                           /* [4] @ [4, 5] */
  case 4: return kiln_matmul(a, b);                                           /* [2, 3, 4] @ [4] */
  case 5: return kiln_matmul(a, b);                                           /* [4] @ [4] */
  case 6: return kiln_mm(kiln_t(a), kiln_narrow(b, 1, 1, 3));                 /* [4, 3]^T @ narrow */
  case 7: return kiln_bmm(a, kiln_transpose(b, 1, 2));                        /* [2, 3, 4] @ [2, 5, 4]^T */
  case 8: return kiln_mv(kiln_t(a), kiln_narrow(b, 0, 2, 4));                 /* [4, 3]^T @ x[2..6] */
  case 9: return kiln_dot(kiln_slice(a, 0, 0, 8, 2), b);                      /* a[::2] . b */
  case 10: return kiln_mm(kiln_expand(a, 2, (int64_t[]){3, 4}), b);           /* stride-0 rows */
  case 11: return kiln_matmul(kiln_expand(a, 3, (int64_t[]){2, 3, 4}), b);    /* batch stride 0 */
  default: return NULL;
  }
}

static void products(void **state) {
  (void)state;
  static const struct {
    mm_case c;
    int nda, ndb;
    int64_t sa[4], sb[4];
  } cases[] = {
      {{"matmul 3-D @ 2-D", 0}, 3, 2, {2, 3, 4}, {4, 5}},
      {{"matmul transposed batch", 1}, 3, 2, {2, 4, 3}, {4, 5}},
      {{"matmul batch broadcast", 2}, 4, 3, {2, 1, 3, 4}, {3, 2, 4}},
      {{"matmul 1-D @ 2-D", 3}, 1, 2, {4}, {4, 5}},
      {{"matmul 3-D @ 1-D", 4}, 3, 1, {2, 3, 4}, {4}},
      {{"matmul 1-D @ 1-D", 5}, 1, 1, {4}, {4}},
      {{"mm transposed", 6}, 2, 2, {4, 3}, {4, 5}},
      {{"bmm transposed", 7}, 3, 3, {2, 3, 4}, {2, 5, 4}},
      {{"mv transposed", 8}, 2, 1, {4, 3}, {7}},
      {{"dot strided", 9}, 1, 1, {8}, {4}},
      {{"mm stride-0 rows", 10}, 1, 2, {4}, {4, 2}},
      {{"matmul stride-0 batch", 11}, 2, 2, {3, 4}, {4, 2}},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    uint64_t seed = 8000 + i;
    gc_input in[2] = {gc_in(&seed, cases[i].nda, cases[i].sa, -1, 1), gc_in(&seed, cases[i].ndb, cases[i].sb, -1, 1)};
    gc_check(cases[i].c.name, mm_case_fn, (void *)&cases[i].c, in, 2, seed);
  }
}

/* Does the profile since kiln_profile_begin name a product whose sizes
 * end its name ("_24x40x6": gemm_ or blas_ kernels alike)? */
static bool ran_product(const char *sizes) {
  kiln_kernel_record r;
  for (int i = 0; i < kiln_profile_count(); i++)
    if (kiln_profile_get(i, &r) == KILN_OK && strstr(r.name, sizes)) return true;
  return false;
}

/* A linear layer's weight w [O, I] is read as w^T, column-major: its
 * gradient is the product g^T x [O, I] (Torch's grad_weight), written
 * in w's own layout, not x^T g [I, O] that an optimizer would then read
 * transposed; an A operand read as p^T [M, K] likewise gets (q g^T)^T.
 * Which products ran (by their sizes, M x N x K) and the gradients'
 * values against double loops. */
static void column_major_operand_gradients(void **state) {
  (void)state;
  enum { B = 6, I = 40, O = 24 };
  kiln_scope_begin();
  double xv[B * I], wv[O * I], cv[B * O];
  for (int i = 0; i < B * I; i++) xv[i] = (double)((i * 7) % 11 - 5) / 4;
  for (int i = 0; i < O * I; i++) wv[i] = (double)((i * 5) % 13 - 6) / 8;
  for (int i = 0; i < B * O; i++) cv[i] = (double)((i * 3) % 7 - 3) / 2;
  kiln_tensor *x = kiln_from_data(KILN_F64, 2, (int64_t[]){B, I}, xv);
  kiln_tensor *w = kiln_from_data(KILN_F64, 2, (int64_t[]){O, I}, wv);
  kiln_tensor *c = kiln_from_data(KILN_F64, 2, (int64_t[]){B, O}, cv);
  kiln_tensor *y = kiln_matmul(x, kiln_t(w));                   /* [B, O] */
  kiln_tensor *p = w;                                           /* read as A = p^T [I, O]: */
  kiln_tensor *z = kiln_matmul(kiln_t(p), kiln_t(c));           /* [I, O] @ [O, B] = [I, B] */
  kiln_tensor *g[2], *gz;
  assert_int_equal(kiln_grad(&y, &c, 1, (kiln_tensor *[]){w, x}, 2, g), KILN_OK);
  kiln_tensor *ct = kiln_contiguous(kiln_t(x));                 /* [I, B] cotangent of z */
  assert_int_equal(kiln_grad(&z, &ct, 1, &p, 1, &gz), KILN_OK);
  kiln_profile_begin();
  assert_int_equal(kiln_realize_many((kiln_tensor *[]){g[0], g[1], gz}, 3), KILN_OK);
  kiln_profile_end();
  assert_true(ran_product("_24x40x6"));  /* g^T x, and c^T ct^T for p: [O, I], K = B */
  assert_false(ran_product("_40x24x6")); /* neither x^T g nor ct c */
  assert_true(ran_product("_6x40x24"));  /* x's gradient g w: row-major x, as before */
  double gw[O * I], gx[B * I], gp[O * I];
  assert_int_equal(kiln_read(g[0], gw, sizeof gw), KILN_OK);
  assert_int_equal(kiln_read(g[1], gx, sizeof gx), KILN_OK);
  assert_int_equal(kiln_read(gz, gp, sizeof gp), KILN_OK);
  for (int o = 0; o < O; o++)
    for (int i = 0; i < I; i++) {
      double want = 0; /* gw = c^T x; gp = (ct c)^T with ct = x^T: the same */
      for (int b = 0; b < B; b++) want += cv[b * O + o] * xv[b * I + i];
      assert_float_equal(gw[o * I + i], want, 1e-12);
      assert_float_equal(gp[o * I + i], want, 1e-12);
    }
  for (int b = 0; b < B; b++)
    for (int i = 0; i < I; i++) {
      double want = 0;
      for (int o = 0; o < O; o++) want += cv[b * O + o] * wv[o * I + i];
      assert_float_equal(gx[b * I + i], want, 1e-12);
    }
  kiln_scope_end();
}

typedef struct addmm_case {
  double beta, alpha;
  int bias_kind; /* 0: [N], 1: [M, 1], 2: [M, N] transposed */
} addmm_case;

static kiln_tensor *addmm_fn(kiln_tensor *const *x, void *ctx) {
  const addmm_case *c = ctx;
  kiln_tensor *bias = c->bias_kind == 0   ? kiln_select(x[2], 1, 0)             /* [5], stride 3 */
                      : c->bias_kind == 1 ? kiln_narrow(kiln_t(x[2]), 1, 1, 1) /* [3, 1], offset 1 */
                                          : kiln_t(x[2]);                      /* [3, 5] */
  return kiln_addmm(bias, kiln_t(x[0]), x[1], c->beta, c->alpha);
}

static void addmms(void **state) {
  (void)state;
  static const addmm_case cases[] = {{1, 1, 0}, {0.5, -2, 1}, {0, 1.5, 2}, {2, 1, 2}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    uint64_t seed = 8100 + i;
    /* a^T: [3, 4] from x0 [4, 3]; b [4, 5]; x2 [5, 3] (bias views) */
    gc_input in[3] = {gc_in(&seed, 2, (int64_t[]){4, 3}, -1, 1), gc_in(&seed, 2, (int64_t[]){4, 5}, -1, 1),
                      gc_in(&seed, 2, (int64_t[]){5, 3}, -1, 1)};
    gc_check("addmm", addmm_fn, (void *)&cases[i], in, 3, seed);
  }
}

/* ------------------------------------------------------------ compositions */

/* A small MLP: relu(x W1 + b1) W2, log_softmax, a picked loss — many ops
 * whose backward fuses; the hidden layer forced mid-way in the forced
 * runs. */
static kiln_tensor *mlp(kiln_tensor *const *x, void *ctx) {
  (void)ctx;
  kiln_tensor *h = M(kiln_gelu(kiln_addmm(x[2], x[0], x[1], 1, 1)));      /* [3, 5] */
  kiln_tensor *o = kiln_log_softmax(kiln_matmul(h, kiln_t(x[3])), 1); /* [3, 4] */
  return kiln_mul(M(o), kiln_sigmoid(o));
}

static void composition(void **state) {
  (void)state;
  uint64_t seed = 9000;
  gc_input in[4] = {gc_in(&seed, 2, (int64_t[]){3, 6}, -1, 1), gc_in(&seed, 2, (int64_t[]){6, 5}, -1, 1),
                    gc_in(&seed, 1, (int64_t[]){5}, -1, 1), gc_in(&seed, 2, (int64_t[]){4, 5}, -1, 1)};
  gc_check("mlp", mlp, NULL, in, 4, seed);
  gc_report("test_grad_ops");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(unary_ops),       cmocka_unit_test(binary_ops),       cmocka_unit_test(where_op),
      cmocka_unit_test(broadcasting),    cmocka_unit_test(casts),            cmocka_unit_test(casts_half_exact),
      cmocka_unit_test(reductions),      cmocka_unit_test(stats),            cmocka_unit_test(norms),
      cmocka_unit_test(prod_with_zeros), cmocka_unit_test(extremum_ties),    cmocka_unit_test(scans),
      cmocka_unit_test(cumprod_exact_products), cmocka_unit_test(softmaxes), cmocka_unit_test(layer_norms),
      cmocka_unit_test(products),        cmocka_unit_test(column_major_operand_gradients),
      cmocka_unit_test(addmms),          cmocka_unit_test(composition),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
