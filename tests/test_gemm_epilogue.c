/*
 * test_gemm_epilogue.c — epilogues fused into the generated GEMM's
 * stores (runtime/gemm_fused.c, passes/gemm_chain.c, the micro-
 * kernel's steps in codegen_llvm/llvm_gemm.c): relu(C + bias along N),
 * C + bias along M, C·s + residual, (residual − C) / s, C·(a realized
 * scalar), clamp(C + bias), maximum(residual, C) and C + a transposed
 * residual (a general epilogue: the fuser's kernel run per tile,
 * runtime/gemm_group.c), for M, N, K of 1, primes, sizes that are not multiples of
 * MR or NR and a K that crosses KC, F32 and F64; each against a
 * double-precision reference computed here from the operands' values,
 * within the generated GEMM's bound (test_gemm.c) plus one rounding per
 * epilogue step. Each runs on the generated GEMM with fusion (the
 * profile then names one kernel, `gemm_MxNxK_bias_relu`), on OpenBLAS
 * (rt_gemm_set_mode(2), as KILN_GEMM=blas) and with fusion off
 * (rt_set_fusion(0), as KILN_FUSE=0): the epilogue is then a kernel of
 * its own and the values are the same. kiln_linear and kiln_addmm, of
 * 3-D and 1-D inputs (the epilogue reads C reshaped); batched products
 * (each batch's operands, broadcast over the batch or not). Gradients through
 * a fused linear + relu, forced after it or with it, against a double
 * reference. General epilogues (GELU in erf and tanh form, SiLU, tanh,
 * sigmoid, exp, a cast to the other float dtype, operands along rows and
 * columns, a strided residual) the same ways, fused as gemm_MxNxK_<ops>.
 * With KILN_TEST_EPILOGUE_EMU=1 (ctest gemm_epilogue_emu) it runs instead
 * the epilogues and batched products under cuda-emu, fused into the tiled
 * GEMM kernel (cuda_gemm_MxNxK_<steps>).
 */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kiln/kiln.h"
#include "cuda_test_util.h"
#include "rt_internal.h"
#include "test_util.h"

static uint64_t rng = 0x2545F4914F6CDD1Du;

/* A value in [-1, 1) (xorshift; deterministic). */
static double next_value(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (double)(rng >> 11) / (double)(UINT64_C(1) << 52) - 1.0;
}

/* A realized [rows, cols] tensor of dt with random values (scope-owned). */
static kiln_tensor *random_matrix(kiln_dtype dt, int64_t rows, int64_t cols) {
  int64_t n = rows * cols;
  double *v = test_malloc(sizeof *v * (size_t)n);
  for (int64_t i = 0; i < n; i++) v[i] = next_value();
  kiln_tensor *t = kiln_to_dtype(kiln_from_data(KILN_F64, 2, (int64_t[]){rows, cols}, v), dt);
  test_free(v);
  assert_int_equal(kiln_realize(t), KILN_OK);
  return t;
}

/* t's values as F64, row-major (test_malloc'ed). */
static double *values_of(kiln_tensor *t) {
  int64_t n = kiln_numel(t);
  double *v = test_malloc(sizeof *v * (size_t)(n > 0 ? n : 1));
  kiln_scope_begin();
  assert_int_equal(kiln_read(kiln_to_dtype(kiln_contiguous(t), KILN_F64), v, sizeof *v * (size_t)n), KILN_OK);
  kiln_scope_end();
  return v;
}

/* ------------------------------------------------------ the epilogues */

typedef enum epilogue {
  BIAS_RELU,  /* relu(C + bias[N]) */
  BIAS_M,     /* C + bias[M, 1] */
  SCALE_RES,  /* C * 0.5 + res[M, N] */
  RSUB_DIV,   /* (res[M, N] - C) / 4 */
  MUL_SCALAR, /* C * s, s a realized scalar tensor read through a broadcast view */
  TRANS_RES,  /* C + t(res[N, M]): strided along N, a general epilogue (gemm_group.c) */
  CLAMP_BIAS, /* clamp(C + bias[N], -0.5, 0.5) */
  MAX_RES,    /* maximum(res[M, N], C) */
  N_EPILOGUES
} epilogue;

/* An added operand's name in the kernel's: res when it varies along M
 * and N, bias along one of them, add when it is one value. */
static const char *added(bool along_m, bool along_n) { return along_m && along_n ? "res" : along_m || along_n ? "bias" : "add"; }

/* e's name in the fused kernel's (gemm_epilogue.h: rt_gemm_epi_name). */
static void name_of(epilogue e, int64_t m, int64_t n, char *buf, size_t len) {
  switch (e) {
  case BIAS_RELU: snprintf(buf, len, "%s_relu", added(false, n > 1)); break;
  case BIAS_M: snprintf(buf, len, "%s", added(m > 1, false)); break;
  case SCALE_RES: snprintf(buf, len, "scale_%s", added(m > 1, n > 1)); break;
  case RSUB_DIV: snprintf(buf, len, "sub_div"); break;
  case MUL_SCALAR: snprintf(buf, len, "scale"); break;
  case CLAMP_BIAS: snprintf(buf, len, "%s_max_min", added(false, n > 1)); break;
  case MAX_RES: snprintf(buf, len, "max"); break;
  case TRANS_RES: snprintf(buf, len, "%s", m > 1 && n > 1 ? "add" : added(m > 1, n > 1)); break; /* general: its ops */
  default: snprintf(buf, len, "%s", added(m > 1, n > 1)); break;
  }
}

static const char *names[] = {"bias_relu", "bias_m",    "scale_res",  "rsub_div",
                              "mul_scalar", "trans_res", "clamp_bias", "max_res"};

typedef struct operands {
  kiln_tensor *a, *b, *x; /* x: the epilogue's operand as built (bias, residual, scalar) */
} operands;

/* The expression of `e` over a · b (scope-owned). */
static kiln_tensor *build(epilogue e, const operands *o) {
  kiln_tensor *c = kiln_matmul(o->a, o->b);
  switch (e) {
  case BIAS_RELU: return kiln_relu(kiln_add(c, o->x));
  case BIAS_M: return kiln_add(c, o->x);
  case SCALE_RES: return kiln_add(kiln_mul_scalar(c, 0.5), o->x);
  case RSUB_DIV: return kiln_div_scalar(kiln_sub(o->x, c), 4.0);
  case MUL_SCALAR: return kiln_mul(c, o->x);
  case CLAMP_BIAS: return kiln_clamp(kiln_add(c, o->x), -0.5, 0.5);
  case MAX_RES: return kiln_maximum(o->x, c);
  default: return kiln_add(c, kiln_t(o->x));
  }
}

/* e's operand for an M×N product (scope-owned). */
static kiln_tensor *operand_of(epilogue e, kiln_dtype dt, int64_t m, int64_t n) {
  switch (e) {
  case BIAS_RELU: case CLAMP_BIAS: return kiln_view(random_matrix(dt, 1, n), 1, (int64_t[]){n});
  case BIAS_M: return random_matrix(dt, m, 1);
  case MUL_SCALAR: {
    kiln_tensor *s = kiln_to_dtype(kiln_scalar(KILN_F64, 1.75), dt);
    assert_int_equal(kiln_realize(s), KILN_OK);
    return s;
  }
  case TRANS_RES: return random_matrix(dt, n, m);
  default: return random_matrix(dt, m, n);
  }
}

/* Element (r, c) of e's operand (values xv, row-major as built). */
static double operand_at(epilogue e, const double *xv, int64_t m, int64_t n, int64_t r, int64_t c) {
  switch (e) {
  case BIAS_RELU: case CLAMP_BIAS: return xv[c];
  case BIAS_M: return xv[r];
  case MUL_SCALAR: return xv[0];
  case TRANS_RES: return xv[c * m + r];
  default: (void)n; return xv[r * n + c];
  }
}

/* The reference of e applied to the exact product p (and its error
 * bound: the product's, scaled as the epilogue scales it, plus one
 * rounding of each step's result). */
static double reference(epilogue e, double p, double x, double pbound, double eps, double *bound) {
  double v, scale = 1, rounding = 0;
  switch (e) {
  case BIAS_RELU: v = p + x, rounding = fabs(v), v = v > 0 ? v : 0; break;
  case BIAS_M: case TRANS_RES: v = p + x, rounding = fabs(v); break;
  case CLAMP_BIAS: v = p + x, rounding = fabs(v), v = v < -0.5 ? -0.5 : v > 0.5 ? 0.5 : v; break;
  case MAX_RES: v = p > x ? p : x; break;
  case SCALE_RES: v = p * 0.5 + x, scale = 0.5, rounding = fabs(p * 0.5) + fabs(v); break;
  case RSUB_DIV: v = (x - p) / 4, scale = 0.25, rounding = fabs(x - p) / 4 + fabs(v); break;
  default: v = p * x, scale = fabs(x), rounding = fabs(v); break;
  }
  *bound = pbound * scale + 2.0 * eps * rounding + DBL_MIN;
  return v;
}

/* Which GEMM fuses: the generated one (gemm_..., backend llvm), or under
 * cuda-emu the tiled GEMM kernel (cuda_gemm_..., backend cuda-emu). */
static const char *fused_prefix = "", *fused_backend = "llvm";

/* The fusing GEMM's record of this product with its epilogue fused
 * ([cuda_]gemm_[f64_]MxNxK_<name>) is in the profile. */
static bool fused_record(kiln_dtype dt, int64_t m, int64_t n, int64_t k, const char *suffix) {
  char want[96];
  snprintf(want, sizeof want, "%sgemm_%s%lldx%lldx%lld_%s", fused_prefix, dt == KILN_F64 ? "f64_" : "", (long long)m,
           (long long)n, (long long)k, suffix);
  kiln_kernel_record r;
  for (int i = 0; i < kiln_profile_count(); i++) {
    assert_int_equal(kiln_profile_get(i, &r), KILN_OK);
    if (strcmp(r.name, want) == 0) {
      assert_string_equal(r.backend, fused_backend);
      return true;
    }
  }
  return false;
}

/* One epilogue on an M×N×K product of dt, checked; fused: whether the
 * profile must show it fused into the GEMM (else that it is not). */
static void check(epilogue e, kiln_dtype dt, int64_t m, int64_t n, int64_t k, bool fused) {
  kiln_scope_begin();
  operands o = {random_matrix(dt, m, k), random_matrix(dt, k, n), operand_of(e, dt, m, n)};
  double *av = values_of(o.a), *bv = values_of(o.b), *xv = values_of(o.x);
  kiln_profile_begin();
  kiln_tensor *y = build(e, &o);
  assert_int_equal(kiln_realize(y), KILN_OK);
  kiln_profile_end();
  char what[128];
  snprintf(what, sizeof what, "%s %lldx%lldx%lld %s", names[e], (long long)m, (long long)n, (long long)k,
           dt == KILN_F64 ? "F64" : "F32");
  char suffix[32];
  name_of(e, m, n, suffix, sizeof suffix);
  if (fused_record(dt, m, n, k, suffix) != fused)
    fail_msg("%s: the profile %s the fused GEMM", what, fused ? "lacks" : "has");
  double *yv = values_of(y), eps = dt == KILN_F64 ? DBL_EPSILON : FLT_EPSILON;
  for (int64_t r = 0; r < m; r++)
    for (int64_t c = 0; c < n; c++) {
      double p = 0, mag = 0, bound;
      for (int64_t q = 0; q < k; q++) p += av[r * k + q] * bv[q * n + c], mag += fabs(av[r * k + q] * bv[q * n + c]);
      double want = reference(e, p, operand_at(e, xv, m, n, r, c), 2.0 * (double)k * eps * mag, eps, &bound);
      if (!(fabs(yv[r * n + c] - want) <= bound))
        fail_msg("%s: y[%lld, %lld] = %.17g, want %.17g (bound %.3g)", what, (long long)r, (long long)c,
                 yv[r * n + c], want, bound);
    }
  test_free(av), test_free(bv), test_free(xv), test_free(yv);
  kiln_scope_end();
  expect_no_error();
}

/* M, N, K: 1, primes, not multiples of MR (14, 6) or NR (32, 16, 8), a K
 * past KC (a split K: the epilogue only on the last block), N of 64. */
static const int64_t shapes[][3] = {{1, 1, 1}, {7, 13, 31}, {31, 97, 13}, {13, 1, 7}, {1, 37, 5}, {29, 64, 600}};
#define N_SHAPES (sizeof shapes / sizeof shapes[0])

/* mode: 1 the generated GEMM (fused), 2 OpenBLAS; fusion on or off.
 * Under cuda-emu (the tiled GEMM fuses whatever the mode) the general
 * epilogue (TRANS_RES of more than one row and column) stays a kernel. */
static void all_epilogues(int mode, bool fusion) {
  rt_gemm_set_mode(mode);
  rt_set_fusion(fusion ? 1 : 0);
  bool emu = *fused_prefix != '\0';
  for (int dt = 0; dt < 2; dt++)
    for (size_t s = 0; s < N_SHAPES; s++)
      for (int e = 0; e < N_EPILOGUES; e++) {
        int64_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
        bool general = e == TRANS_RES && m > 1 && n > 1; /* (a strided residual: else a chain) */
        bool fused = emu ? fusion && !general : mode == 1 && fusion;
        check((epilogue)e, dt ? KILN_F64 : KILN_F32, m, n, k, fused);
      }
}

static void fused_on_generated_gemm(void **state) { all_epilogues(1, true); }
static void separate_on_openblas(void **state) { all_epilogues(2, true); }
static void separate_unfused(void **state) { all_epilogues(1, false); }

/* The tests below are about the fused path: the generated GEMM with
 * fusion on, whatever KILN_FUSE says (CI also runs the suite with
 * KILN_FUSE=0; separate_unfused covers that path). */
static void use_fused_gemm(void) {
  rt_gemm_set_mode(1);
  rt_set_fusion(1);
}

/* kiln_linear (weight [out, in] read transposed) and kiln_addmm with
 * alpha: their epilogues fuse too. */
static void linear_and_addmm(void **state) {
  use_fused_gemm();
  kiln_scope_begin();
  kiln_tensor *x = random_matrix(KILN_F32, 9, 20), *w = random_matrix(KILN_F32, 33, 20);
  kiln_tensor *bias = kiln_view(random_matrix(KILN_F32, 1, 33), 1, (int64_t[]){33});
  kiln_profile_begin();
  kiln_tensor *y = kiln_relu(kiln_linear(x, w, bias));
  assert_int_equal(kiln_realize(y), KILN_OK); /* apart: one force would share the product (CSE) */
  kiln_tensor *z = kiln_addmm(bias, x, kiln_t(w), 1.0, 3.0);
  assert_int_equal(kiln_realize(z), KILN_OK);
  kiln_profile_end();
  assert_true(fused_record(KILN_F32, 9, 33, 20, "bias_relu"));
  assert_true(fused_record(KILN_F32, 9, 33, 20, "scale_bias"));
  double *xv = values_of(x), *wv = values_of(w), *bv = values_of(bias), *yv = values_of(y), *zv = values_of(z);
  for (int64_t r = 0; r < 9; r++)
    for (int64_t c = 0; c < 33; c++) {
      double p = 0, mag = 0;
      for (int64_t q = 0; q < 20; q++) p += xv[r * 20 + q] * wv[c * 20 + q], mag += fabs(xv[r * 20 + q] * wv[c * 20 + q]);
      double pre = p + bv[c], tol = 40.0 * FLT_EPSILON * mag + 2.0 * FLT_EPSILON * fabs(pre);
      assert_true(fabs(yv[r * 33 + c] - (pre > 0 ? pre : 0)) <= tol);
      assert_true(fabs(zv[r * 33 + c] - (3.0 * p + bv[c])) <= 3.0 * tol + 4.0 * FLT_EPSILON * fabs(3.0 * p));
    }
  test_free(xv), test_free(wv), test_free(bv), test_free(yv), test_free(zv);
  kiln_scope_end();
  expect_no_error();
}

/* y [.., N] against relu(x [.., K] · wᵀ + bias), rows of x and y
 * row-major, bias[r, c] = bv[(r / per) · bstride + c] (per rows share a
 * bias row). */
static void expect_linear(kiln_tensor *x, kiln_tensor *w, const double *bv, int64_t per, int64_t bstride,
                          kiln_tensor *y) {
  int64_t n = kiln_size(w, 0), k = kiln_size(w, 1), rows = kiln_numel(x) / k;
  double *xv = values_of(x), *wv = values_of(w), *yv = values_of(y);
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < n; c++) {
      double p = 0, mag = 0;
      for (int64_t q = 0; q < k; q++) p += xv[r * k + q] * wv[c * k + q], mag += fabs(xv[r * k + q] * wv[c * k + q]);
      double pre = p + bv[r / per * bstride + c], want = pre > 0 ? pre : 0;
      double tol = 2.0 * (double)k * FLT_EPSILON * mag + 2.0 * FLT_EPSILON * fabs(pre) + DBL_MIN;
      if (!(fabs(yv[r * n + c] - want) <= tol))
        fail_msg("y[%lld, %lld] = %.9g, want %.9g", (long long)r, (long long)c, yv[r * n + c], want);
    }
  test_free(xv), test_free(wv), test_free(yv);
}

/* kiln_linear of a 3-D input (one GEMM of the rows, its result viewed
 * [2, 5, 33]) and of a 1-D one ([33]): the epilogue reads C reshaped and
 * fuses; a bias [2, 1, 33] broadcast along the middle dim does not merge
 * into one view of C's rows: not a fixed step, it fuses as a general
 * epilogue (the kernel over tiles), same values. */
static void linear_of_other_ranks(void **state) {
  use_fused_gemm();
  kiln_scope_begin();
  kiln_tensor *w = random_matrix(KILN_F32, 33, 20);
  kiln_tensor *bias = kiln_view(random_matrix(KILN_F32, 1, 33), 1, (int64_t[]){33});
  kiln_tensor *x3 = kiln_view(random_matrix(KILN_F32, 10, 20), 3, (int64_t[]){2, 5, 20});
  kiln_tensor *x1 = kiln_view(random_matrix(KILN_F32, 1, 20), 1, (int64_t[]){20});
  kiln_tensor *b3 = kiln_view(random_matrix(KILN_F32, 2, 33), 3, (int64_t[]){2, 1, 33});
  double *bv = values_of(bias), *b3v = values_of(b3);
  kiln_tensor *ys[3] = {kiln_relu(kiln_linear(x3, w, bias)), kiln_relu(kiln_linear(x1, w, bias)),
                        kiln_relu(kiln_add(kiln_linear(x3, w, NULL), b3))};
  const char *fused[3] = {"gemm_10x33x20_bias_relu", "gemm_1x33x20_bias_relu", "gemm_10x33x20_add_relu"};
  for (int i = 0; i < 3; i++) {
    kiln_profile_begin();
    assert_int_equal(kiln_realize(ys[i]), KILN_OK);
    kiln_profile_end();
    bool seen = false;
    kiln_kernel_record r;
    for (int j = 0; j < kiln_profile_count(); j++) {
      assert_int_equal(kiln_profile_get(j, &r), KILN_OK);
      seen |= strstr(r.name, "_relu") && strncmp(r.name, "gemm_", 5) == 0;
      if (fused[i] && strcmp(r.name, fused[i]) == 0) fused[i] = NULL;
    }
    assert_null(fused[i]);
    assert_true(seen);
  }
  assert_int_equal(kiln_dim(ys[0]), 3);
  expect_linear(x3, w, bv, 10, 0, ys[0]);
  expect_linear(x1, w, bv, 1, 0, ys[1]);
  expect_linear(x3, w, b3v, 5, 33, ys[2]);
  test_free(bv), test_free(b3v);
  kiln_scope_end();
  expect_no_error();
}

/* bmm [3, 13, 7] · [3, 7, 37] with relu(C + bias[37]), C + residual
 * [3, 13, 37], C + residual [13, 37] (broadcast over the batch) and
 * C + bias [3, 1, 37] (one per batch): each batch's operands. */
static void batched_products(void **state) {
  use_fused_gemm();
  const int64_t nb = 3, m = 13, k = 7, n = 37;
  kiln_scope_begin();
  kiln_tensor *a = kiln_view(random_matrix(KILN_F64, nb * m, k), 3, (int64_t[]){nb, m, k});
  kiln_tensor *b = kiln_view(random_matrix(KILN_F64, nb * k, n), 3, (int64_t[]){nb, k, n});
  kiln_tensor *xs[4] = {kiln_view(random_matrix(KILN_F64, 1, n), 1, (int64_t[]){n}),
                        kiln_view(random_matrix(KILN_F64, nb * m, n), 3, (int64_t[]){nb, m, n}),
                        random_matrix(KILN_F64, m, n),
                        kiln_view(random_matrix(KILN_F64, nb, n), 3, (int64_t[]){nb, 1, n})};
  const char *steps[4] = {"bias_relu", "res", "res", "bias"};
  double *av = values_of(a), *bv = values_of(b);
  for (int t = 0; t < 4; t++) {
    kiln_tensor *y = kiln_add(kiln_matmul(a, b), xs[t]);
    if (t == 0) y = kiln_relu(y);
    kiln_profile_begin();
    assert_int_equal(kiln_realize(y), KILN_OK);
    kiln_profile_end();
    if (!fused_record(KILN_F64, m, n, k, steps[t])) fail_msg("case %d: no fused %s in the profile", t, steps[t]);
    double *xv = values_of(xs[t]), *yv = values_of(y);
    for (int64_t i = 0; i < nb; i++)
      for (int64_t row = 0; row < m; row++)
        for (int64_t c = 0; c < n; c++) {
          double p = 0, mag = 0;
          for (int64_t q = 0; q < k; q++) {
            double v = av[(i * m + row) * k + q] * bv[(i * k + q) * n + c];
            p += v, mag += fabs(v);
          }
          double x = t == 0 ? xv[c] : t == 1 ? xv[(i * m + row) * n + c] : t == 2 ? xv[row * n + c] : xv[i * n + c];
          double want_v = t == 0 ? (p + x > 0 ? p + x : 0) : p + x;
          double bound = 2.0 * (double)k * DBL_EPSILON * mag + 2.0 * DBL_EPSILON * fabs(p + x) + DBL_MIN;
          if (!(fabs(yv[(i * m + row) * n + c] - want_v) <= bound))
            fail_msg("case %d: y[%lld, %lld, %lld] = %.17g, want %.17g", t, (long long)i, (long long)row, (long long)c,
                     yv[(i * m + row) * n + c], want_v);
        }
    test_free(xv), test_free(yv);
  }
  test_free(av), test_free(bv);
  kiln_scope_end();
  expect_no_error();
}

/* ------------------------------------------------ general epilogues */

/* Groups the fixed steps cannot express, run as the GEMM's tile epilogue
 * (runtime/gemm_group.c): the fuser's kernel lowered over tiles. */
typedef enum general {
  GELU_ERF,  /* gelu(C) (erf form) */
  GELU_TANH, /* 0.5·C·(1 + tanh(√(2/π)·(C + 0.044715·C³))) */
  SILU,      /* silu(C + bias[N]) */
  TANH,      /* tanh(C) */
  SIGMOID,   /* sigmoid(C) · col[M, 1] */
  EXP,       /* exp(C · 0.25) */
  CAST,      /* (C + bias[N]) to the other float dtype */
  ROW_COL,   /* C · col[M, 1] + row[N] */
  T_RES,     /* C + t(res[N, M]): a residual strided along N */
  N_GENERAL
} general;

#define SQRT_2_OVER_PI 0.79788456080286535588

static const char *general_names[] = {"gelu_erf", "gelu_tanh", "silu", "tanh", "sigmoid", "exp", "cast", "row_col", "t_res"};

typedef struct general_operands {
  kiln_tensor *a, *b, *row, *col, *res; /* row [N], col [M, 1], res [N, M] */
} general_operands;

static kiln_tensor *build_general(general e, const general_operands *o) {
  kiln_tensor *c = kiln_matmul(o->a, o->b);
  switch (e) {
  case GELU_ERF: return kiln_gelu(c);
  case GELU_TANH: {
    kiln_tensor *inner = kiln_add(c, kiln_mul_scalar(kiln_mul(kiln_mul(c, c), c), 0.044715));
    kiln_tensor *t = kiln_tanh(kiln_mul_scalar(inner, SQRT_2_OVER_PI));
    return kiln_mul(kiln_mul_scalar(c, 0.5), kiln_add_scalar(t, 1.0));
  }
  case SILU: return kiln_silu(kiln_add(c, o->row));
  case TANH: return kiln_tanh(c);
  case SIGMOID: return kiln_mul(kiln_sigmoid(c), o->col);
  case EXP: return kiln_exp(kiln_mul_scalar(c, 0.25));
  case CAST: {
    kiln_dtype other = kiln_dtype_of(c) == KILN_F32 ? KILN_F64 : KILN_F32;
    return kiln_to_dtype(kiln_add(c, o->row), other);
  }
  case ROW_COL: return kiln_add(kiln_mul(c, o->col), o->row);
  default: return kiln_add(c, kiln_t(o->res));
  }
}

/* The value of e at the exact product p (row value rv, column value cv,
 * residual value xv), and its bound: the product's bound times the
 * slope of e there, plus a few roundings of e's ops in the output's
 * dtype (eps_out) and the math functions' error (a few ulps). */
static double general_reference(general e, double p, double rv, double cv, double xv, double pbound, double eps,
                                double eps_out, double *bound) {
  double v, slope = 1, mag;
  switch (e) {
  case GELU_ERF: v = 0.5 * p * (1 + erf(p / sqrt(2.0))), slope = 1.2; break;
  case GELU_TANH: {
    double t = tanh(SQRT_2_OVER_PI * (p + 0.044715 * p * p * p));
    v = 0.5 * p * (1 + t), slope = 1.2 + 0.2 * p * p;
    break;
  }
  case SILU: v = (p + rv) / (1 + exp(-(p + rv))), slope = 1.1; break;
  case TANH: v = tanh(p); break;
  case SIGMOID: v = cv / (1 + exp(-p)), slope = 0.25 * fabs(cv); break;
  case EXP: v = exp(0.25 * p), slope = 0.25 * v; break;
  case CAST: v = p + rv; break;
  case ROW_COL: v = p * cv + rv, slope = fabs(cv); break;
  default: v = p + xv; break;
  }
  mag = fabs(v) + fabs(p) + fabs(rv) + 1;
  *bound = slope * pbound + 16.0 * (eps + eps_out) * mag + DBL_MIN;
  return v;
}

/* A record of the product fused with a general epilogue
 * (gemm_[f64_]MxNxK_<ops>) is in the profile. */
static bool general_record(kiln_dtype dt, int64_t m, int64_t n, int64_t k) {
  char want[96];
  int len = snprintf(want, sizeof want, "gemm_%s%lldx%lldx%lld_", dt == KILN_F64 ? "f64_" : "", (long long)m,
                     (long long)n, (long long)k);
  kiln_kernel_record r;
  for (int i = 0; i < kiln_profile_count(); i++) {
    assert_int_equal(kiln_profile_get(i, &r), KILN_OK);
    if (strncmp(r.name, want, (size_t)len) == 0) return true;
  }
  return false;
}

static void check_general(general e, kiln_dtype dt, int64_t m, int64_t n, int64_t k, bool fused) {
  kiln_scope_begin();
  general_operands o = {random_matrix(dt, m, k), random_matrix(dt, k, n),
                        kiln_view(random_matrix(dt, 1, n), 1, (int64_t[]){n}), random_matrix(dt, m, 1),
                        random_matrix(dt, n, m)};
  double *av = values_of(o.a), *bv = values_of(o.b), *rv = values_of(o.row), *cv = values_of(o.col);
  double *xv = values_of(o.res);
  kiln_profile_begin();
  kiln_tensor *y = build_general(e, &o);
  assert_int_equal(kiln_realize(y), KILN_OK);
  kiln_profile_end();
  char what[128];
  snprintf(what, sizeof what, "%s %lldx%lldx%lld %s", general_names[e], (long long)m, (long long)n, (long long)k,
           dt == KILN_F64 ? "F64" : "F32");
  if (general_record(dt, m, n, k) != fused) fail_msg("%s: the profile %s the fused GEMM", what, fused ? "lacks" : "has");
  double eps = dt == KILN_F64 ? DBL_EPSILON : FLT_EPSILON;
  double eps_out = kiln_dtype_of(y) == KILN_F64 ? DBL_EPSILON : FLT_EPSILON;
  double *yv = values_of(y);
  for (int64_t r = 0; r < m; r++)
    for (int64_t c = 0; c < n; c++) {
      double p = 0, mag = 0, bound;
      for (int64_t q = 0; q < k; q++) p += av[r * k + q] * bv[q * n + c], mag += fabs(av[r * k + q] * bv[q * n + c]);
      double want = general_reference(e, p, rv[c], cv[r], xv[c * m + r], 2.0 * (double)k * eps * mag, eps, eps_out,
                                      &bound);
      if (!(fabs(yv[r * n + c] - want) <= bound))
        fail_msg("%s: y[%lld, %lld] = %.17g, want %.17g (bound %.3g)", what, (long long)r, (long long)c,
                 yv[r * n + c], want, bound);
    }
  test_free(av), test_free(bv), test_free(rv), test_free(cv), test_free(xv), test_free(yv);
  kiln_scope_end();
  expect_no_error();
}

/* Every general epilogue on every shape and both dtypes: fused on the
 * generated GEMM (mode 1, fusion on), a kernel of its own on OpenBLAS
 * and unfused (a sample of shapes: the values are the kernels'). */
static void all_general(int mode, bool fusion) {
  rt_gemm_set_mode(mode);
  rt_set_fusion(fusion ? 1 : 0);
  bool fused = mode == 1 && fusion;
  for (int dt = 0; dt < 2; dt++)
    for (size_t s = fused ? 0 : 1; s < N_SHAPES; s += fused ? 1 : 2)
      for (int e = 0; e < N_GENERAL; e++)
        check_general((general)e, dt ? KILN_F64 : KILN_F32, shapes[s][0], shapes[s][1], shapes[s][2], fused);
}

static void general_fused_on_generated_gemm(void **state) {
  use_fused_gemm();
  all_general(1, true);
}

/* Small blocks (MC 28, KC 48, NC 64): several row blocks, column blocks
 * and KC blocks per product, each column block's epilogue called apart. */
static void general_small_blocks(void **state) {
  use_fused_gemm();
  rt_gemm_set_blocking(28, 48, 64);
  for (int dt = 0; dt < 2; dt++)
    for (int e = 0; e < N_GENERAL; e += 3) check_general((general)e, dt ? KILN_F64 : KILN_F32, 61, 97, 200, true);
}
static void general_separate_on_openblas(void **state) { all_general(2, true); }
static void general_separate_unfused(void **state) { all_general(1, false); }

/* ------------------------------------------------------- gradients */

/* y = relu(x·w + b) and the gradients of <y, g> with respect to x, w and
 * b, forced after y (forced_first) or with it, against the reference:
 * dpre = g where y > 0, dx = dpre·wᵀ, dw = xᵀ·dpre, db = Σ_rows dpre. */
static void check_grads(bool forced_first) {
  const int64_t m = 11, k = 23, n = 37;
  kiln_scope_begin();
  kiln_tensor *x = random_matrix(KILN_F64, m, k), *w = random_matrix(KILN_F64, k, n);
  kiln_tensor *b = kiln_view(random_matrix(KILN_F64, 1, n), 1, (int64_t[]){n}), *g = random_matrix(KILN_F64, m, n);
  kiln_profile_begin();
  kiln_tensor *y = kiln_relu(kiln_add(kiln_matmul(x, w), b));
  if (forced_first) assert_int_equal(kiln_realize(y), KILN_OK);
  kiln_tensor *wrt[3] = {x, w, b}, *grads[3];
  assert_int_equal(kiln_grad(&y, &g, 1, wrt, 3, grads), KILN_OK);
  kiln_tensor *all[4] = {y, grads[0], grads[1], grads[2]};
  assert_int_equal(kiln_realize_many(all, 4), KILN_OK);
  kiln_profile_end();
  /* forced with the gradients, y is stored by the kernel of relu's
   * gradient (fuse.c rule 7): the product runs alone */
  assert_true(fused_record(KILN_F64, m, n, k, "bias_relu") == forced_first);
  double *xv = values_of(x), *wv = values_of(w), *gv = values_of(g), *yv = values_of(y);
  double *dx = values_of(grads[0]), *dw = values_of(grads[1]), *db = values_of(grads[2]);
  double tol = 1e-12;
  for (int64_t c = 0; c < n; c++) {
    double s = 0;
    for (int64_t r = 0; r < m; r++) s += yv[r * n + c] > 0 ? gv[r * n + c] : 0;
    assert_true(fabs(db[c] - s) <= tol);
  }
  for (int64_t r = 0; r < m; r++)
    for (int64_t q = 0; q < k; q++) {
      double s = 0;
      for (int64_t c = 0; c < n; c++) s += (yv[r * n + c] > 0 ? gv[r * n + c] : 0) * wv[q * n + c];
      assert_true(fabs(dx[r * k + q] - s) <= tol);
    }
  for (int64_t q = 0; q < k; q++)
    for (int64_t c = 0; c < n; c++) {
      double s = 0;
      for (int64_t r = 0; r < m; r++) s += xv[r * k + q] * (yv[r * n + c] > 0 ? gv[r * n + c] : 0);
      assert_true(fabs(dw[q * n + c] - s) <= tol);
    }
  test_free(xv), test_free(wv), test_free(gv), test_free(yv), test_free(dx), test_free(dw), test_free(db);
  kiln_scope_end();
  expect_no_error();
}

static void gradients_through_fused_linear_relu(void **state) {
  use_fused_gemm();
  check_grads(true);
  check_grads(false);
}

/* ------------------------------------------------ cuda-emu */

/* Selects cuda-emu, whose tiled GEMM kernel (runtime/cuda_gemm_run.c)
 * fuses the chains; skips without the toolchain (cuda_test_util.h). */
static void use_emu(void) {
  if (kiln_set_backend("cuda-emu") != KILN_OK) {
    char why[1024];
    snprintf(why, sizeof why, "%s", kiln_last_error());
    kiln_clear_error();
    skip_without_emu(why);
  }
  fused_prefix = "cuda_";
  fused_backend = "cuda-emu";
}

/* The same epilogues, fused into the tiled GEMM kernel under cuda-emu
 * (each step before the kernel's store, as CUDA C checked by NVRTC).
 * (Unfused, they are the kernels cuda_emu_suite runs.) */
static void fused_on_cuda_emu(void **state) {
  use_emu();
  all_epilogues(1, true);
}

/* Batched products' epilogues under cuda-emu: each batch's operand at
 * its batch stride, a broadcast one at stride 0. */
static void batched_on_cuda_emu(void **state) {
  use_emu();
  batched_products(state);
}

static int restore(void **state) {
  if (*fused_prefix) assert_int_equal(kiln_set_backend("llvm"), KILN_OK);
  fused_prefix = "", fused_backend = "llvm";
  rt_gemm_set_blocking(0, 0, 0);
  rt_gemm_set_mode(-1);
  rt_set_fusion(-1);
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(fused_on_generated_gemm, restore),
      cmocka_unit_test_teardown(separate_on_openblas, restore),
      cmocka_unit_test_teardown(separate_unfused, restore),
      cmocka_unit_test_teardown(linear_and_addmm, restore),
      cmocka_unit_test_teardown(linear_of_other_ranks, restore),
      cmocka_unit_test_teardown(batched_products, restore),
      cmocka_unit_test_teardown(gradients_through_fused_linear_relu, restore),
      cmocka_unit_test_teardown(general_fused_on_generated_gemm, restore),
      cmocka_unit_test_teardown(general_small_blocks, restore),
      cmocka_unit_test_teardown(general_separate_on_openblas, restore),
      cmocka_unit_test_teardown(general_separate_unfused, restore),
  };
  /* The cuda-emu ones run as their own ctest (gemm_epilogue_emu: without
   * LeakSanitizer under the sanitizers, tests/CMakeLists.txt). */
  const struct CMUnitTest emu_tests[] = {
      cmocka_unit_test_teardown(fused_on_cuda_emu, restore),
      cmocka_unit_test_teardown(batched_on_cuda_emu, restore),
  };
  const char *emu = getenv("KILN_TEST_EPILOGUE_EMU");
  if (emu && strcmp(emu, "1") == 0) return cmocka_run_group_tests(emu_tests, NULL, NULL);
  return cmocka_run_group_tests(tests, NULL, NULL);
}
