/*
 * test_attention.c — kiln_scaled_dot_product_attention (nn/attention.c)
 * without Torch: values against a double-precision loop written here
 * (causal, BOOL and float masks, broadcast batch dims, F64, F32, F16 and
 * BF16, lengths that are not multiples of 8), gradients w.r.t. q, k, v and a
 * float mask by central differences (grad_check.h) — through the fused
 * kernel (test_attention_fused.c compares it with the composition) —, the
 * composition's causal mask cost (it fuses into the softmax's kernel: the
 * same kernels and the same bytes written as without a mask), and the
 * errors.
 * tests/python/test_attention_torch.py compares with Torch at random.
 */
#define _GNU_SOURCE /* setenv */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "kiln/kiln.h"
#include "test_util.h"
#include "grad_check.h"

#define V(...) ((int64_t[]){__VA_ARGS__})

enum { MASK_NONE, MASK_BOOL, MASK_FLOAT, MASK_CAUSAL };

/* One attention problem: q [B, L, E] and k, v [S, E], [S, Ev] shared by
 * the batch (broadcast), the mask [L, S] (broadcast over B). */
typedef struct problem {
  int64_t B, L, S, E, Ev;
  int mask;
  double scale; /* as passed: 0 means 1/sqrt(E) */
  double q[256], k[256], v[256], m[256];
} problem;

static void fill(problem *p, uint64_t seed) {
  for (int64_t i = 0; i < p->B * p->L * p->E; i++) p->q[i] = gc_uniform(&seed, -2, 2);
  for (int64_t i = 0; i < p->S * p->E; i++) p->k[i] = gc_uniform(&seed, -2, 2);
  for (int64_t i = 0; i < p->S * p->Ev; i++) p->v[i] = gc_uniform(&seed, -2, 2);
  for (int64_t i = 0; i < p->L * p->S; i++)
    p->m[i] = p->mask == MASK_BOOL ? (i % p->S == 0 || gc_uniform(&seed, 0, 1) < 0.6) : gc_uniform(&seed, -1, 1);
}

/* out [B, L, Ev] in double, the formula written out. */
static void reference(const problem *p, double *out) {
  double scale = p->scale == 0 ? 1 / sqrt((double)p->E) : p->scale, s[64];
  for (int64_t b = 0; b < p->B; b++)
    for (int64_t i = 0; i < p->L; i++) {
      double mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j < p->S; j++) {
        double d = 0;
        for (int64_t e = 0; e < p->E; e++) d += p->q[(b * p->L + i) * p->E + e] * p->k[j * p->E + e];
        d *= scale;
        if (p->mask == MASK_FLOAT) d += p->m[i * p->S + j];
        if ((p->mask == MASK_BOOL && p->m[i * p->S + j] == 0) || (p->mask == MASK_CAUSAL && j > i)) d = -INFINITY;
        s[j] = d;
        mx = fmax(mx, d);
      }
      for (int64_t j = 0; j < p->S; j++) sum += s[j] = exp(s[j] - mx);
      for (int64_t c = 0; c < p->Ev; c++) {
        double o = 0;
        for (int64_t j = 0; j < p->S; j++) o += s[j] / sum * p->v[j * p->Ev + c];
        out[(b * p->L + i) * p->Ev + c] = o;
      }
    }
}

static kiln_tensor *mask_tensor(const problem *p, kiln_dtype dtype) {
  if (p->mask == MASK_FLOAT) return kiln_to_dtype(kiln_from_data(KILN_F64, 2, V(p->L, p->S), p->m), dtype);
  if (p->mask != MASK_BOOL) return NULL;
  bool b[256];
  for (int64_t i = 0; i < p->L * p->S; i++) b[i] = p->m[i] != 0;
  return kiln_from_data(KILN_BOOL, 2, V(p->L, p->S), b);
}

static void check_values(problem *p, kiln_dtype dtype, double tol) {
  double want[256];
  reference(p, want);
  kiln_scope_begin();
  kiln_tensor *q = kiln_to_dtype(kiln_from_data(KILN_F64, 3, V(p->B, p->L, p->E), p->q), dtype);
  kiln_tensor *k = kiln_to_dtype(kiln_from_data(KILN_F64, 2, V(p->S, p->E), p->k), dtype);
  kiln_tensor *v = kiln_to_dtype(kiln_from_data(KILN_F64, 2, V(p->S, p->Ev), p->v), dtype);
  kiln_tensor *o = kiln_scaled_dot_product_attention(q, k, v, mask_tensor(p, dtype), 0, p->mask == MASK_CAUSAL,
                                                     p->scale);
  expect_no_error();
  assert_int_equal(kiln_dim(o), 3);
  assert_int_equal(kiln_size(o, 0), p->B);
  assert_int_equal(kiln_size(o, 2), p->Ev);
  assert_int_equal(kiln_dtype_of(o), dtype);
  expect_values_tol(o, want, p->B * p->L * p->Ev, tol);
  kiln_scope_end();
}

static void test_values(void **state) {
  (void)state;
  static const int64_t shapes[][5] = {{2, 5, 7, 3, 4}, {1, 9, 9, 5, 2}, {3, 1, 11, 2, 3}, {2, 13, 6, 4, 1}};
  uint64_t seed = 17;
  for (int s = 0; s < 4; s++)
    for (int mask = MASK_NONE; mask <= MASK_CAUSAL; mask++) {
      problem p = {.B = shapes[s][0], .L = shapes[s][1], .S = shapes[s][2], .E = shapes[s][3], .Ev = shapes[s][4],
                   .mask = mask, .scale = s == 1 ? 0.7 : 0};
      fill(&p, seed++);
      check_values(&p, KILN_F64, 1e-12);
      check_values(&p, KILN_F32, 2e-5);
      check_values(&p, KILN_F16, 2e-2);  /* computed in F32: the inputs' and result's rounding */
      check_values(&p, KILN_BF16, 1e-1);
    }
}

/* ----------------------------------------------------------- gradients */

static kiln_tensor *sdpa_case(kiln_tensor *const *x, void *ctx) {
  const int *mask = ctx;
  kiln_tensor *m = *mask == MASK_FLOAT ? x[3] : NULL;
  return kiln_scaled_dot_product_attention(x[0], x[1], x[2], m, 0, *mask == MASK_CAUSAL, 0);
}

static void test_gradients(void **state) {
  (void)state;
  uint64_t seed = 5;
  for (int mask = MASK_NONE; mask <= MASK_CAUSAL; mask++) {
    if (mask == MASK_BOOL) continue; /* where's rule: covered by causal */
    /* q [2, 5, 3] against k, v [1, 6, 3], [6, 2]: the batch broadcasts */
    gc_input in[4] = {gc_in(&seed, 3, V(2, 5, 3), -1, 1), gc_in(&seed, 3, V(1, 6, 3), -1, 1),
                      gc_in(&seed, 2, V(6, 2), -1, 1), gc_in(&seed, 2, V(5, 6), -1, 1)};
    char name[64];
    snprintf(name, sizeof name, "sdpa mask %d", mask);
    gc_check(name, sdpa_case, &mask, in, mask == MASK_FLOAT ? 4 : 3, seed);
  }
}

/* ------------------------------------------------- the causal mask's cost */

/* Kernels run and bytes they wrote for one forced attention. */
static void run_profiled(kiln_tensor *q, bool causal, int *kernels, int64_t *written) {
  kiln_scope_begin();
  kiln_profile_begin();
  kiln_tensor *o = kiln_scaled_dot_product_attention(q, q, q, NULL, 0, causal, 0);
  assert_int_equal(kiln_realize(o), KILN_OK);
  kiln_profile_end();
  kiln_scope_end();
  *kernels = kiln_profile_count();
  *written = 0;
  for (int i = 0; i < *kernels; i++) {
    kiln_kernel_record r;
    assert_int_equal(kiln_profile_get(i, &r), KILN_OK);
    *written += r.bytes_written;
  }
}

/* The composition's causal mask (KILN_ATTENTION=unfused: what dropout
 * and CUDA tensors run; the fused kernel takes it as an attribute), with
 * fusion pinned on, whatever KILN_FUSE says (CI also runs the suite with
 * KILN_FUSE=0, where every node is a kernel of its own). */
static void test_causal_mask_is_free(void **state) {
  (void)state;
  setenv("KILN_ATTENTION", "unfused", 1);
  rt_set_fusion(1);
  kiln_scope_begin();
  kiln_manual_seed(3);
  kiln_tensor *q = kiln_randn(KILN_F32, 3, V(2, 67, 16));
  assert_int_equal(kiln_realize(q), KILN_OK);
  int n0, n1;
  int64_t w0, w1;
  run_profiled(q, false, &n0, &w0);
  run_profiled(q, true, &n1, &w1);
  /* the mask adds no kernel and writes no [L, S] buffer: it fuses into
   * the kernel that reads the scores */
  assert_int_equal(n1, n0);
  assert_int_equal(w1, w0);
  kiln_scope_end();
  rt_set_fusion(-1);
  unsetenv("KILN_ATTENTION");
  expect_no_error();
}

/* -------------------------------------------------------------- errors */

static void test_errors(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = kiln_zeros(KILN_F32, 3, V(2, 3, 4)), *bm = kiln_ones(KILN_BOOL, 2, V(3, 3));
  assert_null(kiln_scaled_dot_product_attention(x, x, x, bm, 0, true, 0));
  expect_error(KILN_ERR_ARG, "kiln_scaled_dot_product_attention", "exclusive", NULL);
  assert_null(kiln_scaled_dot_product_attention(x, x, x, NULL, -0.1, false, 0));
  expect_error(KILN_ERR_ARG, "dropout_p = -0.1", NULL);
  assert_null(kiln_scaled_dot_product_attention(x, x, x, NULL, 0, false, INFINITY));
  expect_error(KILN_ERR_ARG, "scale inf", NULL);
  assert_null(kiln_scaled_dot_product_attention(x, kiln_zeros(KILN_F32, 2, V(3, 5)), x, NULL, 0, false, 0));
  expect_error(KILN_ERR_SHAPE, "q sizes [2, 3, 4] and k sizes [3, 5]", NULL);
  assert_null(kiln_scaled_dot_product_attention(x, x, kiln_zeros(KILN_F32, 2, V(2, 4)), NULL, 0, false, 0));
  expect_error(KILN_ERR_SHAPE, "dim -2 (S)", NULL);
  assert_null(kiln_scaled_dot_product_attention(x, kiln_zeros(KILN_F32, 3, V(3, 3, 4)), x, NULL, 0, false, 0));
  expect_error(KILN_ERR_SHAPE, "batch dims of k (sizes [3, 3, 4])", NULL);
  assert_null(kiln_scaled_dot_product_attention(x, x, x, kiln_zeros(KILN_F32, 2, V(3, 2)), 0, false, 0));
  expect_error(KILN_ERR_SHAPE, "attn_mask sizes [3, 2]", "[2, 3, 3]", NULL);
  assert_null(kiln_scaled_dot_product_attention(x, x, x, kiln_zeros(KILN_I64, 2, V(3, 3)), 0, false, 0));
  expect_error(KILN_ERR_DTYPE, "attn_mask dtype i64", NULL);
  assert_null(kiln_scaled_dot_product_attention(x, x, kiln_zeros(KILN_F64, 3, V(2, 3, 4)), NULL, 0, false, 0));
  expect_error(KILN_ERR_DTYPE, "v dtype f64", NULL);
  assert_null(kiln_scaled_dot_product_attention(kiln_zeros(KILN_F32, 1, V(4)), x, x, NULL, 0, false, 0));
  expect_error(KILN_ERR_SHAPE, "q must have at least 2 dims", NULL);
  assert_null(kiln_scaled_dot_product_attention(NULL, x, x, NULL, 0, false, 0));
  expect_error(KILN_ERR_ARG, "kiln_scaled_dot_product_attention", NULL);
  kiln_scope_end();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_values),
      cmocka_unit_test(test_gradients),
      cmocka_unit_test(test_causal_mask_is_free),
      cmocka_unit_test(test_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
