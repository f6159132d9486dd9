/*
 * test_inplace_ops.c — the in-place arithmetic of ops/inplace_ops.c
 * (kiln_add_, kiln_mul_scalar_, kiln_exp_, kiln_addcmul_, ...): values
 * written through views of a larger storage, laziness, Torch 1.13's dtype
 * (can_cast) and shape rules, NULL arguments, aliasing, gradients.
 * tests/python/test_inplace_torch.py compares them with Torch at random.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "graph.h"
#include "kiln/kiln.h"
#include "rt_internal.h"
#include "test_util.h"

#define V(...) ((int64_t[]){__VA_ARGS__})

static void expect_values(kiln_tensor *t, const double *want, int64_t n) { expect_values_tol(t, want, n, 1e-6); }

/* base [3, 4] = 0..11; a transposed narrow of columns 1..2 gets other [3]
 * added (broadcast over its rows): the other columns stay, and a second
 * view of the same storage sees the write. */
static void through_transposed_narrow(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *base = kiln_reshape(kiln_arange(KILN_F32, 0, 12, 1), 2, V(3, 4));
  kiln_tensor *v = kiln_transpose(kiln_narrow(base, 1, 1, 2), 0, 1); /* [2, 3] */
  kiln_tensor *row1 = kiln_select(base, 0, 1);
  kiln_tensor *other = kiln_from_data(KILN_F32, 1, V(3), (float[]){10, 20, 30});
  assert_int_equal(kiln_add_(v, other), KILN_OK);
  expect_values(base, (double[]){0, 11, 12, 3, 4, 25, 26, 7, 8, 39, 40, 11}, 12);
  expect_values(row1, (double[]){4, 25, 26, 7}, 4);
  expect_values(v, (double[]){11, 25, 39, 12, 26, 40}, 6);
  /* chained: scalar, unary, clamp and addc* through the same view */
  assert_int_equal(kiln_mul_scalar_(v, 0.5), KILN_OK);   /* 5.5 12.5 19.5 / 6 13 20 */
  assert_int_equal(kiln_sub_scalar_(v, 0.25), KILN_OK);  /* 5.25 12.25 19.25 / 5.75 12.75 19.75 */
  assert_int_equal(kiln_floor_(v), KILN_OK);             /* 5 12 19 / 5 12 19 */
  assert_int_equal(kiln_clamp_(v, 6, 18), KILN_OK);      /* 6 12 18 / 6 12 18 */
  kiln_tensor *two = kiln_full(KILN_F32, 1, V(1), 2);
  kiln_tensor *three = kiln_from_data(KILN_F32, 2, V(2, 1), (float[]){3, 4});
  assert_int_equal(kiln_addcmul_(v, two, three, 0.5), KILN_OK); /* += 3 / += 4 */
  assert_int_equal(kiln_addcdiv_(v, three, two, -1), KILN_OK);  /* -= 1.5 / -= 2 */
  expect_values(base, (double[]){0, 7.5, 8, 3, 4, 13.5, 14, 7, 8, 19.5, 20, 11}, 12);
  kiln_scope_end();
  expect_no_error();
}

/* Integers through a stepped slice: elements 0, 2, 4 of a [6] vector. */
static void integers_through_stepped_slice(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = kiln_from_data(KILN_I32, 1, V(6), (int32_t[]){7, 1, -7, 1, 9, 1});
  kiln_tensor *s = kiln_slice(x, 0, 0, 6, 2);
  kiln_tensor *d = kiln_from_data(KILN_I64, 1, V(3), (int64_t[]){2, 3, -4});
  assert_int_equal(kiln_remainder_(s, d), KILN_OK); /* 1, 2, -3 */
  expect_values(x, (double[]){1, 1, 2, 1, -3, 1}, 6);
  assert_int_equal(kiln_fmod_(s, kiln_full(KILN_I32, 0, NULL, 2)), KILN_OK); /* 1, 0, -1 */
  assert_int_equal(kiln_add_scalar_(s, 3), KILN_OK);                      /* 4, 3, 2 */
  assert_int_equal(kiln_pow_(s, kiln_full(KILN_I64, 1, V(1), 2)), KILN_OK); /* 16, 9, 4 */
  assert_int_equal(kiln_neg_(s), KILN_OK);
  assert_int_equal(kiln_abs_(kiln_narrow(x, 0, 0, 3)), KILN_OK); /* elements 0..2 */
  assert_int_equal(kiln_dtype_of(x), KILN_I32);
  expect_values(x, (double[]){16, 1, 9, 1, -4, 1}, 6);
  kiln_scope_end();
  expect_no_error();
}

/* Every unary function on one float vector. */
static void unary_values(void **state) {
  (void)state;
  static const struct {
    int (*f)(kiln_tensor *);
    double (*ref)(double);
  } cases[] = {{kiln_exp_, exp},   {kiln_exp2_, exp2},   {kiln_log_, log},   {kiln_log2_, log2},
               {kiln_log1p_, log1p}, {kiln_expm1_, expm1}, {kiln_sqrt_, sqrt}, {kiln_sin_, sin},
               {kiln_cos_, cos},   {kiln_tan_, tan},     {kiln_tanh_, tanh}, {kiln_erf_, erf},
               {kiln_ceil_, ceil}, {kiln_trunc_, trunc}};
  const double in[4] = {0.25, 1.5, 2.5, 3.75};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    kiln_scope_begin();
    kiln_tensor *x = kiln_from_data(KILN_F64, 1, V(4), in);
    assert_int_equal(cases[c].f(x), KILN_OK);
    double want[4];
    for (int i = 0; i < 4; i++) want[i] = cases[c].ref(in[i]);
    expect_values_tol(x, want, 4, 1e-12);
    kiln_scope_end();
  }
  kiln_scope_begin();
  kiln_tensor *x = kiln_from_data(KILN_F64, 1, V(4), (double[]){-2.5, 0.5, 1.5, 4});
  assert_int_equal(kiln_round_(x), KILN_OK); /* half to even */
  expect_values(x, (double[]){-2, 0, 2, 4}, 4);
  assert_int_equal(kiln_sign_(x), KILN_OK);
  expect_values(x, (double[]){-1, 0, 1, 1}, 4);
  assert_int_equal(kiln_relu_(x), KILN_OK);
  expect_values(x, (double[]){0, 0, 1, 1}, 4);
  assert_int_equal(kiln_sigmoid_(x), KILN_OK);
  double s1 = 1 / (1 + exp(-1.0));
  expect_values_tol(x, (double[]){0.5, 0.5, s1, s1}, 4, 1e-12);
  assert_int_equal(kiln_reciprocal_(x), KILN_OK);
  assert_int_equal(kiln_rsqrt_(x), KILN_OK);
  expect_values_tol(x, (double[]){sqrt(0.5), sqrt(0.5), sqrt(s1), sqrt(s1)}, 4, 1e-12);
  assert_int_equal(kiln_div_(x, kiln_full(KILN_F64, 0, NULL, 2)), KILN_OK);
  assert_int_equal(kiln_atan2_(x, kiln_full(KILN_F64, 0, NULL, 1)), KILN_OK);
  double a = atan2(sqrt(0.5) / 2, 1), b = atan2(sqrt(s1) / 2, 1);
  expect_values_tol(x, (double[]){a, a, b, b}, 4, 1e-12);
  kiln_scope_end();
  expect_no_error();
}

/* Nothing is compiled or run until a value is read. */
static void lazy_until_read(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = kiln_arange(KILN_F64, 0, 6, 1);
  int64_t compiled = rt_compile_count();
  assert_int_equal(kiln_mul_scalar_(x, 2), KILN_OK);
  assert_int_equal(kiln_exp_(kiln_narrow(x, 0, 1, 2)), KILN_OK);
  assert_int_equal(kiln_add_(x, kiln_ones(KILN_F64, 1, V(6))), KILN_OK);
  assert_int_equal(rt_compile_count(), compiled);
  assert_true(graph_pending_count() > 0);
  expect_values_tol(x, (double[]){1, exp(2) + 1, exp(4) + 1, 7, 9, 11}, 6, 1e-9);
  kiln_scope_end();
  expect_no_error();
}

/* An operand aliasing the destination reads its old values; an op
 * recorded before the write does not see it. */
static void aliasing_reads_old_values(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *x = kiln_from_data(KILN_F32, 2, V(2, 2), (float[]){1, 2, 3, 4});
  kiln_tensor *before = kiln_mul_scalar(x, 1);
  assert_int_equal(kiln_add_(x, kiln_t(x)), KILN_OK);
  expect_values(x, (double[]){2, 5, 5, 8}, 4);
  expect_values(before, (double[]){1, 2, 3, 4}, 4);
  assert_int_equal(kiln_mul_(x, x), KILN_OK);
  expect_values(x, (double[]){4, 25, 25, 64}, 4);
  kiln_scope_end();
  expect_no_error();
}

/* Torch's can_cast: no float -> int/bool, no int -> bool; lower is fine. */
static void dtype_rules(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *i32 = kiln_from_data(KILN_I32, 1, V(3), (int32_t[]){1, 2, 3});
  kiln_tensor *i64 = kiln_from_data(KILN_I64, 1, V(3), (int64_t[]){10, 20, 30});
  kiln_tensor *b = kiln_from_data(KILN_BOOL, 1, V(3), (bool[]){true, false, true});
  assert_int_equal(kiln_div_(i32, kiln_full(KILN_I32, 1, V(3), 2)), KILN_ERR_DTYPE);
  expect_error(KILN_ERR_DTYPE, "kiln_div_", "f32", "i32", NULL);
  assert_int_equal(kiln_add_scalar_(i64, 2.5), KILN_ERR_DTYPE);
  expect_error(KILN_ERR_DTYPE, "kiln_add_scalar_", "i64", NULL);
  assert_int_equal(kiln_add_(b, i32), KILN_ERR_DTYPE);
  expect_error(KILN_ERR_DTYPE, "kiln_add_", "i32", "bool", NULL);
  assert_int_equal(kiln_exp_(i32), KILN_ERR_DTYPE);
  expect_error(KILN_ERR_DTYPE, "kiln_exp_", NULL);
  assert_int_equal(kiln_addcdiv_(kiln_zeros(KILN_F32, 1, V(3)), i32, i64, 1), KILN_ERR_DTYPE);
  expect_error(KILN_ERR_DTYPE, "kiln_addcdiv_", "integer division", NULL);
  assert_int_equal(kiln_clamp_(b, 0, 1), KILN_ERR_DTYPE);
  expect_error(KILN_ERR_DTYPE, "kiln_clamp_", NULL);
  assert_int_equal(kiln_sub_(b, b), KILN_ERR_DTYPE);
  expect_error(KILN_ERR_DTYPE, "kiln_sub_", NULL);
  /* nothing was written by the failed calls */
  expect_values(i32, (double[]){1, 2, 3}, 3);
  expect_values(i64, (double[]){10, 20, 30}, 3);
  expect_values(b, (double[]){1, 0, 1}, 3);
  /* i32 += i64 computes in i64 and stores i32; bool |= bool; float t
   * takes integer operands */
  assert_int_equal(kiln_add_(i32, i64), KILN_OK);
  assert_int_equal(kiln_dtype_of(i32), KILN_I32);
  expect_values(i32, (double[]){11, 22, 33}, 3);
  assert_int_equal(kiln_add_(b, kiln_from_data(KILN_BOOL, 1, V(3), (bool[]){false, true, false})), KILN_OK);
  expect_values(b, (double[]){1, 1, 1}, 3);
  kiln_tensor *f = kiln_full(KILN_F32, 1, V(3), 1);
  assert_int_equal(kiln_div_(f, kiln_full(KILN_I64, 1, V(3), 4)), KILN_OK);
  expect_values(f, (double[]){0.25, 0.25, 0.25}, 3);
  /* addcmul_ on integers casts value to the integer dtype (Torch) */
  assert_int_equal(kiln_addcmul_(i32, i64, i64, 0.5), KILN_OK);
  expect_values(i32, (double[]){11, 22, 33}, 3);
  assert_int_equal(kiln_addcmul_(i32, i64, i32, 2.9), KILN_OK); /* += 2 * i64 * i32 */
  expect_values(i32, (double[]){231, 902, 2013}, 3);
  kiln_scope_end();
  expect_no_error();
}

static void shape_rules(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *t = kiln_zeros(KILN_F32, 1, V(3));
  assert_int_equal(kiln_add_(t, kiln_ones(KILN_F32, 2, V(2, 3))), KILN_ERR_SHAPE);
  expect_error(KILN_ERR_SHAPE, "kiln_add_", "[2, 3]", "[3]", NULL);
  kiln_tensor *one = kiln_zeros(KILN_F32, 1, V(1));
  assert_int_equal(kiln_mul_(one, kiln_ones(KILN_F32, 1, V(3))), KILN_ERR_SHAPE);
  expect_error(KILN_ERR_SHAPE, "kiln_mul_", NULL);
  assert_int_equal(kiln_addcmul_(t, kiln_ones(KILN_F32, 1, V(4)), kiln_ones(KILN_F32, 1, V(3)), 1), KILN_ERR_SHAPE);
  expect_error(KILN_ERR_SHAPE, "kiln_addcmul_", NULL);
  /* an expanded destination repeats storage elements */
  kiln_tensor *e = kiln_expand(kiln_zeros(KILN_F32, 1, V(1)), 1, V(3));
  assert_int_equal(kiln_add_scalar_(e, 1), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_add_scalar_", "stride 0", NULL);
  assert_int_equal(kiln_exp_(e), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_exp_", NULL);
  expect_values(t, (double[]){0, 0, 0}, 3);
  kiln_scope_end();
  expect_no_error();
}

/* NULL arguments: KILN_ERR_ARG; the function returns its own status even
 * while an older error is kept. */
static void null_arguments(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *t = kiln_zeros(KILN_F32, 1, V(3));
  assert_int_equal(kiln_add_(NULL, t), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_add_", "argument t is NULL", NULL);
  assert_int_equal(kiln_add_(t, NULL), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_add_", "argument other is NULL", NULL);
  assert_int_equal(kiln_mul_scalar_(NULL, 2), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_mul_scalar_", NULL);
  assert_int_equal(kiln_sqrt_(NULL), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_sqrt_", NULL);
  assert_int_equal(kiln_clamp_(NULL, 0, 1), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_clamp_", NULL);
  assert_int_equal(kiln_addcmul_(t, t, NULL, 1), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_addcmul_", "t2", NULL);
  assert_int_equal(kiln_addcdiv_(t, NULL, t, 1), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_addcdiv_", "t1", NULL);
  /* own outcome under an older error */
  assert_int_equal(kiln_exp_(NULL), KILN_ERR_ARG);
  assert_int_equal(kiln_add_scalar_(t, 1), KILN_OK);
  assert_int_equal(kiln_div_(kiln_zeros(KILN_I32, 1, V(3)), t), KILN_ERR_DTYPE);
  expect_error(KILN_ERR_ARG, "kiln_exp_", NULL); /* the first error is kept */
  expect_values(t, (double[]){1, 1, 1}, 3);
  kiln_scope_end();
  expect_no_error();
}

/* y = clone(x); y *= x; y = exp(y); loss = sum(y): dloss/dx = 2x exp(x^2). */
static void gradient_through_inplace(void **state) {
  (void)state;
  kiln_scope_begin();
  const double xs[3] = {0.5, -0.3, 1.1};
  kiln_tensor *x = kiln_from_data(KILN_F64, 1, V(3), xs);
  kiln_tensor *y = kiln_clone(x);
  assert_int_equal(kiln_mul_(y, x), KILN_OK);
  assert_int_equal(kiln_exp_(y), KILN_OK);
  kiln_tensor *loss = kiln_sum(y, 0, NULL, false);
  kiln_tensor *g = NULL;
  assert_int_equal(kiln_grad(&loss, NULL, 1, &x, 1, &g), KILN_OK);
  double want[3];
  for (int i = 0; i < 3; i++) want[i] = 2 * xs[i] * exp(xs[i] * xs[i]);
  expect_values_tol(g, want, 3, 1e-12);
  /* through a view: z = clone(x); narrow(z, 0, 1, 2).addcmul_(x[1:], x[1:], 3);
   * loss = sum(z): d/dx = 1 + 6x on elements 1..2 */
  kiln_tensor *z = kiln_clone(x);
  kiln_tensor *tail = kiln_narrow(x, 0, 1, 2);
  assert_int_equal(kiln_addcmul_(kiln_narrow(z, 0, 1, 2), tail, tail, 3), KILN_OK);
  kiln_tensor *loss2 = kiln_sum(z, 0, NULL, false);
  assert_int_equal(kiln_grad(&loss2, NULL, 1, &x, 1, &g), KILN_OK);
  expect_values_tol(g, (double[]){1, 1 + 6 * xs[1], 1 + 6 * xs[2]}, 3, 1e-12);
  kiln_scope_end();
  expect_no_error();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(through_transposed_narrow), cmocka_unit_test(integers_through_stepped_slice),
      cmocka_unit_test(unary_values),              cmocka_unit_test(lazy_until_read),
      cmocka_unit_test(aliasing_reads_old_values), cmocka_unit_test(dtype_rules),
      cmocka_unit_test(shape_rules),               cmocka_unit_test(null_arguments),
      cmocka_unit_test(gradient_through_inplace),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
