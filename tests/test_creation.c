/*
 * test_creation.c — creation functions without reading values: sizes,
 * strides, dtypes and graph nodes of empty/zeros/ones/full/scalar/arange/
 * linspace/rand/randn/from_data/from_blob, storages, tensor_from_storage,
 * set_, resize_, the dtype helpers, and every error path. Values are
 * checked in test_creation_values.c.
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
#include "test_util.h"



#define V(...) ((const int64_t[]){__VA_ARGS__})

static void check_view(const kiln_tensor *t, int ndim, const int64_t *sizes, const int64_t *strides, int64_t offset) {
  assert_non_null(t);
  assert_int_equal(kiln_dim(t), ndim);
  for (int i = 0; i < ndim; i++) {
    if (kiln_sizes(t)[i] != sizes[i] || kiln_strides(t)[i] != strides[i])
      fail_msg("dim %d: size %lld stride %lld, expected %lld %lld", i, (long long)kiln_sizes(t)[i],
               (long long)kiln_strides(t)[i], (long long)sizes[i], (long long)strides[i]);
  }
  assert_int_equal(kiln_storage_offset(t), offset);
}

/* White box: the node a tensor's storage holds. */
static const graph_node *version_of(const kiln_tensor *t) {
  kiln_storage *s = kiln_storage_of(t);
  const graph_node *n = s->version;
  kiln_storage_release(s);
  return n;
}

/* ------------------------------------------------------------- dtypes */

static void test_dtype_helpers(void **state) {
  (void)state;
  assert_string_equal(kiln_dtype_name(KILN_F32), "f32");
  assert_string_equal(kiln_dtype_name(KILN_BOOL), "bool");
  assert_string_equal(kiln_dtype_name(KILN_BF16), "bf16");
  assert_string_equal(kiln_dtype_name(KILN_I64), "i64");
  assert_string_equal(kiln_dtype_name((kiln_dtype)99), "?");
  assert_string_equal(kiln_dtype_name((kiln_dtype)-1), "?");
  const size_t sizes[KILN_DTYPE_COUNT] = {1, 1, 1, 2, 4, 8, 2, 2, 4, 8};
  for (int d = 0; d < KILN_DTYPE_COUNT; d++) assert_int_equal(kiln_dtype_size((kiln_dtype)d), sizes[d]);
  assert_int_equal(kiln_dtype_size(KILN_DTYPE_COUNT), 0);

  assert_int_equal(kiln_default_dtype(), KILN_F32);
  assert_int_equal(kiln_set_default_dtype(KILN_F64), KILN_OK);
  assert_int_equal(kiln_default_dtype(), KILN_F64);
  assert_int_equal(kiln_set_default_dtype(KILN_I32), KILN_ERR_DTYPE);
  expect_error(KILN_ERR_DTYPE, "kiln_set_default_dtype", "i32", NULL);
  assert_int_equal(kiln_set_default_dtype((kiln_dtype)42), KILN_ERR_DTYPE);
  expect_error(KILN_ERR_DTYPE, "kiln_set_default_dtype", "42", NULL);
  assert_int_equal(kiln_default_dtype(), KILN_F64);
  assert_int_equal(kiln_set_default_dtype(KILN_BF16), KILN_OK);
  assert_int_equal(kiln_set_default_dtype(KILN_F32), KILN_OK);
}

/* ---------------------------------------------------------- constants */

static void test_constants_shapes(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *z = kiln_zeros(KILN_F32, 3, V(2, 3, 4));
  check_view(z, 3, V(2, 3, 4), V(12, 4, 1), 0);
  assert_int_equal(kiln_dtype_of(z), KILN_F32);
  const graph_node *n = version_of(z);
  assert_int_equal(n->op, GRAPH_OP_FULL);
  assert_int_equal(n->ndim, 1); /* sources produce the flat storage [numel] */
  assert_int_equal(n->numel, 24);
  assert_true(graph_attr_scalar(n) == 0.0);
  assert_null(n->buffer); /* lazy */
  kiln_storage *s = kiln_storage_of(z);
  assert_int_equal(kiln_storage_numel(s), 24);
  assert_int_equal(kiln_storage_dtype(s), KILN_F32);
  kiln_storage_release(s);

  assert_true(graph_attr_scalar(version_of(kiln_ones(KILN_I8, 1, V(5)))) == 1.0);
  assert_true(graph_attr_scalar(version_of(kiln_full(KILN_I32, 1, V(2), 2.7))) == 2.0);   /* as a cast */
  assert_true(graph_attr_scalar(version_of(kiln_full(KILN_I32, 1, V(2), -2.7))) == -2.0);
  assert_true(graph_attr_scalar(version_of(kiln_full(KILN_BOOL, 1, V(2), 0.5))) == 1.0);
  assert_true(graph_attr_scalar(version_of(kiln_full(KILN_U8, 1, V(2), 300))) == 44.0);  /* wraps */
  assert_true(graph_attr_scalar(version_of(kiln_full(KILN_F16, 1, V(2), 0.1))) == (double)graph_f16_to_f32(graph_f32_to_f16(0.1f)));
  assert_true(graph_attr_scalar(version_of(kiln_full(KILN_F64, 1, V(2), 0.1))) == 0.1);
  check_view(kiln_empty(KILN_U8, 2, V(0, 3)), 2, V(0, 3), V(3, 1), 0);
  assert_int_equal(version_of(kiln_empty(KILN_U8, 2, V(0, 3)))->numel, 0);
  kiln_tensor *sc = kiln_scalar(KILN_F64, 3.5);
  check_view(sc, 0, NULL, NULL, 0);
  assert_int_equal(kiln_numel(sc), 1);
  assert_int_equal(version_of(sc)->numel, 1);
  assert_true(graph_attr_scalar(version_of(sc)) == 3.5);
  check_view(kiln_zeros(KILN_F32, 0, NULL), 0, NULL, NULL, 0);
  int64_t ones[KILN_MAX_DIMS];
  for (int i = 0; i < KILN_MAX_DIMS; i++) ones[i] = 1;
  assert_non_null(kiln_ones(KILN_F32, KILN_MAX_DIMS, ones));
  expect_no_error();
  kiln_scope_end();
}

/* Every creation function that takes sizes rejects the same bad input. */
static void test_sizes_errors(void **state) {
  (void)state;
  typedef kiln_tensor *(*make_fn)(kiln_dtype, int, const int64_t *);
  const make_fn makers[] = {kiln_empty, kiln_zeros, kiln_ones, kiln_rand, kiln_randn};
  const char *names[] = {"kiln_empty", "kiln_zeros", "kiln_ones", "kiln_rand", "kiln_randn"};
  int64_t big[KILN_MAX_DIMS + 1];
  for (int i = 0; i <= KILN_MAX_DIMS; i++) big[i] = 1;
  for (int i = 0; i < 5; i++) {
    assert_null(makers[i](KILN_F32, 2, V(2, -3)));
    expect_error(KILN_ERR_SHAPE, names[i], "negative size", "[2, -3]", NULL);
    assert_null(makers[i](KILN_F32, -1, V(1)));
    expect_error(KILN_ERR_ARG, names[i], "ndim -1", NULL);
    assert_null(makers[i](KILN_F32, KILN_MAX_DIMS + 1, big));
    expect_error(KILN_ERR_ARG, names[i], "ndim 17", NULL);
    assert_null(makers[i](KILN_F32, 2, NULL));
    expect_error(KILN_ERR_ARG, names[i], "sizes is NULL", NULL);
    assert_null(makers[i]((kiln_dtype)77, 1, V(2)));
    expect_error(KILN_ERR_DTYPE, names[i], "dtype 77", NULL);
    assert_null(makers[i](KILN_F32, 3, V(1 << 30, 1 << 30, 1 << 30)));
    expect_error(KILN_ERR_SHAPE, names[i], "overflow", NULL);
    /* empty, but contiguous strides over the other dims would overflow */
    assert_null(makers[i](KILN_F32, 3, V(1LL << 40, 0, 1LL << 40)));
    expect_error(KILN_ERR_SHAPE, names[i], "overflow", NULL);
  }
  assert_null(kiln_full(KILN_F32, 1, V(-1), 2.0));
  expect_error(KILN_ERR_SHAPE, "kiln_full", "[-1]", NULL);
  assert_null(kiln_scalar((kiln_dtype)-3, 1.0));
  expect_error(KILN_ERR_DTYPE, "kiln_scalar", "dtype -3", NULL);
  assert_null(kiln_rand(KILN_I32, 1, V(3)));
  expect_error(KILN_ERR_DTYPE, "kiln_rand", "i32", NULL);
  assert_null(kiln_randn(KILN_BOOL, 1, V(3)));
  expect_error(KILN_ERR_DTYPE, "kiln_randn", "bool", NULL);
}

/* ------------------------------------------------------------- ranges */

static void test_arange_shapes(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *a = kiln_arange(KILN_F32, 0, 10, 3);
  check_view(a, 1, V(4), V(1), 0); /* 0 3 6 9 */
  const graph_node *n = version_of(a);
  assert_int_equal(n->op, GRAPH_OP_ARANGE);
  assert_true(graph_attr_scalar(n) == 0.0 && graph_attr_scalar2(n) == 3.0);
  assert_int_equal(kiln_numel(kiln_arange(KILN_F64, 0, 1, 0.1)), 10); /* ceil(9.99...) in double */
  assert_int_equal(kiln_numel(kiln_arange(KILN_F64, 1, 0, -0.25)), 4);
  assert_int_equal(kiln_numel(kiln_arange(KILN_F32, 0, 0, 1)), 0);
  assert_int_equal(kiln_numel(kiln_arange(KILN_F32, -3, 3, 1)), 6);
  assert_int_equal(kiln_numel(kiln_arange(KILN_F32, 0, 1e-9, 1)), 1);
  /* integer dtypes truncate start/end/step first (Scalar::to<int64_t>) */
  kiln_tensor *i32 = kiln_arange(KILN_I32, 0, 5, 1.5);
  assert_int_equal(kiln_numel(i32), 4); /* length from the double formula: ceil(5/1.5) */
  assert_true(graph_attr_scalar2(version_of(i32)) == 1.0);
  assert_int_equal(kiln_numel(kiln_arange(KILN_I64, 0, 5, 1.5)), 5); /* I64: integer formula */
  assert_int_equal(kiln_numel(kiln_arange(KILN_I64, 10, 0, -3)), 4);
  assert_int_equal(kiln_numel(kiln_arange(KILN_I16, 0.5, 3.9, 1)), 4); /* ceil(3.4) */
  assert_int_equal(kiln_dtype_of(kiln_arange(KILN_U8, 0, 3, 1)), KILN_U8);
  expect_no_error();
  kiln_scope_end();
}

static void test_arange_errors(void **state) {
  (void)state;
  assert_null(kiln_arange(KILN_F32, 0, 10, 0));
  expect_error(KILN_ERR_ARG, "kiln_arange", "step 0", NULL);
  assert_null(kiln_arange(KILN_F32, 0, 10, -1));
  expect_error(KILN_ERR_ARG, "kiln_arange", "step -1", "start 0", "end 10", NULL);
  assert_null(kiln_arange(KILN_F32, 5, 0, 1));
  expect_error(KILN_ERR_ARG, "kiln_arange", "start 5", "end 0", NULL);
  assert_null(kiln_arange(KILN_I32, 0, 5, 0.5)); /* step truncates to 0 */
  expect_error(KILN_ERR_ARG, "kiln_arange", "step 0.5", "i32", NULL);
  assert_null(kiln_arange(KILN_F32, 0, INFINITY, 1));
  expect_error(KILN_ERR_ARG, "kiln_arange", "inf", NULL);
  assert_null(kiln_arange(KILN_F64, NAN, 1, 1));
  expect_error(KILN_ERR_ARG, "kiln_arange", "nan", NULL);
  assert_null(kiln_arange(KILN_F32, 0, 1e30, 1));
  expect_error(KILN_ERR_ARG, "kiln_arange", "invalid length", NULL);
  assert_null(kiln_arange(KILN_I64, 0, 1e19, 1e18));
  expect_error(KILN_ERR_ARG, "kiln_arange", "i64 range", NULL);
  assert_null(kiln_arange(KILN_BOOL, 0, 2, 1));
  expect_error(KILN_ERR_DTYPE, "kiln_arange", "bool", NULL);
  assert_null(kiln_arange((kiln_dtype)12, 0, 2, 1));
  expect_error(KILN_ERR_DTYPE, "kiln_arange", "dtype 12", NULL);
}

static void test_linspace_shapes(void **state) {
  (void)state;
  kiln_scope_begin();
  check_view(kiln_linspace(KILN_F32, 0, 1, 5), 1, V(5), V(1), 0);
  check_view(kiln_linspace(KILN_F32, 0, 1, 0), 1, V(0), V(1), 0);
  kiln_tensor *l = kiln_linspace(KILN_I64, 0, 1, 1);
  check_view(l, 1, V(1), V(1), 0);
  assert_int_equal(kiln_dtype_of(l), KILN_I64);
  assert_non_null(version_of(l)->buffer); /* computed on the host now */
  expect_no_error();
  kiln_scope_end();
  assert_null(kiln_linspace(KILN_F32, 0, 1, -1));
  expect_error(KILN_ERR_ARG, "kiln_linspace", "steps -1", NULL);
  assert_null(kiln_linspace((kiln_dtype)10, 0, 1, 3));
  expect_error(KILN_ERR_DTYPE, "kiln_linspace", "dtype 10", NULL);
}

static void test_random_shapes(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *r = kiln_rand(KILN_F16, 2, V(3, 4));
  check_view(r, 2, V(3, 4), V(4, 1), 0);
  assert_int_equal(kiln_dtype_of(r), KILN_F16);
  assert_non_null(version_of(r)->buffer); /* filled eagerly */
  check_view(kiln_randn(KILN_BF16, 0, NULL), 0, NULL, NULL, 0);
  check_view(kiln_randn(KILN_F64, 1, V(0)), 1, V(0), V(1), 0);
  expect_no_error();
  kiln_scope_end();
}

/* ------------------------------------------------------ caller memory */

static int deleted;
static void count_delete(void *data, void *ctx) {
  (void)data;
  deleted += *(int *)ctx;
}

static void test_from_data_and_blob_shapes(void **state) {
  (void)state;
  kiln_scope_begin();
  float buf[6] = {1, 2, 3, 4, 5, 6};
  kiln_tensor *d = kiln_from_data(KILN_F32, 2, V(2, 3), buf);
  check_view(d, 2, V(2, 3), V(3, 1), 0);
  assert_ptr_not_equal(version_of(d)->buffer->data, buf); /* copied */
  check_view(kiln_from_data(KILN_I32, 1, V(0), NULL), 1, V(0), V(1), 0);
  kiln_tensor *b = kiln_from_blob(KILN_F32, 2, V(2, 2), V(1, 3), buf, NULL, NULL);
  check_view(b, 2, V(2, 2), V(1, 3), 0);
  assert_ptr_equal(version_of(b)->buffer->data, buf);
  kiln_storage *s = kiln_storage_of(b);
  assert_int_equal(kiln_storage_numel(s), 5); /* extent: (2-1)*1 + (2-1)*3 + 1 */
  kiln_storage_release(s);
  check_view(kiln_from_blob(KILN_F32, 1, V(0), NULL, NULL, NULL, NULL), 1, V(0), V(1), 0);
  check_view(kiln_from_blob(KILN_F32, 2, V(3, 2), V(0, 1), buf, NULL, NULL), 2, V(3, 2), V(0, 1), 0);
  expect_no_error();
  kiln_scope_end();

  assert_null(kiln_from_data(KILN_F32, 1, V(3), NULL));
  expect_error(KILN_ERR_ARG, "kiln_from_data", "NULL", "3 elements", NULL);
  assert_null(kiln_from_data(KILN_F32, 1, V(-3), buf));
  expect_error(KILN_ERR_SHAPE, "kiln_from_data", "[-3]", NULL);
  assert_null(kiln_from_data((kiln_dtype)11, 1, V(3), buf));
  expect_error(KILN_ERR_DTYPE, "kiln_from_data", "dtype 11", NULL);
  assert_null(kiln_from_blob(KILN_F32, 2, V(2, 2), V(-1, 2), buf, NULL, NULL));
  expect_error(KILN_ERR_ARG, "kiln_from_blob", "[-1, 2]", NULL);
  assert_null(kiln_from_blob(KILN_F32, 1, V(4), NULL, NULL, NULL, NULL));
  expect_error(KILN_ERR_ARG, "kiln_from_blob", "NULL", NULL);
  assert_null(kiln_from_blob(KILN_F32, 1, V(INT64_MAX / 4), V(8), buf, NULL, NULL));
  expect_error(KILN_ERR_SHAPE, "kiln_from_blob", NULL);
  assert_null(kiln_from_blob(KILN_F32, 1, V(-4), NULL, buf, NULL, NULL));
  expect_error(KILN_ERR_SHAPE, "kiln_from_blob", "[-4]", NULL);
}

/* The deleter runs exactly once, when the last user of the storage goes,
 * and never on a failed call. */
static void test_from_blob_deleter(void **state) {
  (void)state;
  double data[4] = {0};
  int one = 1;
  deleted = 0;
  kiln_tensor *b = kiln_from_blob(KILN_F64, 1, V(4), NULL, data, count_delete, &one);
  kiln_tensor *v = kiln_narrow(b, 0, 1, 2);
  kiln_release(b);
  assert_int_equal(deleted, 0); /* v still uses the storage */
  kiln_tensor *c = kiln_add_scalar(v, 1); /* a pending op reading the blob */
  kiln_release(v);
  assert_int_equal(deleted, 0);
  kiln_release(c);
  assert_int_equal(deleted, 1);
  assert_null(kiln_from_blob(KILN_F64, 1, V(4), V(-1), data, count_delete, &one));
  kiln_clear_error();
  assert_int_equal(deleted, 1);
}

/* ----------------------------------------------------------- storages */

static void test_storages(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_storage *s = kiln_storage_new(KILN_I16, 10);
  assert_non_null(s);
  assert_int_equal(kiln_storage_numel(s), 10);
  assert_int_equal(kiln_storage_dtype(s), KILN_I16);
  kiln_tensor *a = kiln_tensor_from_storage(s, 2, 2, V(2, 3), NULL);
  check_view(a, 2, V(2, 3), V(3, 1), 2);
  assert_int_equal(kiln_dtype_of(a), KILN_I16);
  kiln_tensor *b = kiln_tensor_from_storage(s, 0, 2, V(3, 2), V(1, 4));
  check_view(b, 2, V(3, 2), V(1, 4), 0);
  kiln_storage *sa = kiln_storage_of(a);
  assert_ptr_equal(sa, s);
  kiln_storage_release(sa);
  check_view(kiln_tensor_from_storage(s, 10, 1, V(0), NULL), 1, V(0), V(1), 10);
  check_view(kiln_tensor_from_storage(s, 9, 0, NULL, NULL), 0, NULL, NULL, 9);
  kiln_storage *empty = kiln_storage_new(KILN_F32, 0);
  assert_int_equal(kiln_storage_numel(empty), 0);
  kiln_storage_release(empty);
  expect_no_error();

  assert_null(kiln_tensor_from_storage(s, 5, 2, V(2, 3), NULL));
  expect_error(KILN_ERR_SHAPE, "kiln_tensor_from_storage", "[2, 3]", "offset 5", "10 elements", NULL);
  assert_null(kiln_tensor_from_storage(s, -1, 1, V(2), NULL));
  expect_error(KILN_ERR_ARG, "kiln_tensor_from_storage", "offset -1", NULL);
  assert_null(kiln_tensor_from_storage(s, 0, 1, V(2), V(-2)));
  expect_error(KILN_ERR_ARG, "kiln_tensor_from_storage", "[-2]", NULL);
  assert_null(kiln_tensor_from_storage(s, 0, 1, V(-2), NULL));
  expect_error(KILN_ERR_SHAPE, "kiln_tensor_from_storage", "[-2]", NULL);
  assert_null(kiln_tensor_from_storage(NULL, 0, 1, V(2), NULL));
  expect_error(KILN_ERR_ARG, "kiln_tensor_from_storage", "NULL", NULL);
  kiln_storage_release(s); /* a and b keep it alive */
  assert_int_equal(kiln_dtype_of(b), KILN_I16);
  kiln_scope_end();

  assert_null(kiln_storage_new(KILN_F32, -1));
  expect_error(KILN_ERR_SHAPE, "kiln_storage_new", "[-1]", NULL);
  assert_null(kiln_storage_new((kiln_dtype)20, 1));
  expect_error(KILN_ERR_DTYPE, "kiln_storage_new", "dtype 20", NULL);
  assert_null(kiln_storage_of(NULL));
  expect_error(KILN_ERR_ARG, "kiln_storage_of", NULL);
  assert_int_equal(kiln_storage_numel(NULL), -1);
  expect_error(KILN_ERR_ARG, "kiln_storage_numel", NULL);
  assert_int_equal((int)kiln_storage_dtype(NULL), -1);
  expect_error(KILN_ERR_ARG, "kiln_storage_dtype", NULL);
  assert_null(kiln_storage_retain(NULL));
  kiln_storage_release(NULL);
}

/* ------------------------------------------------------- set_, resize_ */

static void test_set(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *a = kiln_zeros(KILN_F32, 2, V(2, 3));
  kiln_tensor *b = kiln_transpose(kiln_ones(KILN_F32, 2, V(4, 5)), 0, 1);
  kiln_tensor *a_view = kiln_narrow(a, 1, 1, 2);
  assert_int_equal(kiln_set_(a, b), KILN_OK);
  assert_true(kiln_is_set_to(a, b));
  check_view(a, 2, V(5, 4), V(1, 5), 0);
  check_view(a_view, 2, V(2, 2), V(3, 1), 1); /* other tensors of the old storage unaffected */
  assert_int_equal(kiln_set_(a, a), KILN_OK);
  assert_true(kiln_is_set_to(a, b));
  expect_no_error();
  assert_int_equal(kiln_set_(a, NULL), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_set_", "src", NULL);
  assert_int_equal(kiln_set_(NULL, a), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_set_", "dst", NULL);
  kiln_scope_end();
}

static void test_resize_shapes(void **state) {
  (void)state;
  kiln_scope_begin();
  kiln_tensor *t = kiln_zeros(KILN_F32, 2, V(3, 4));
  kiln_storage *s = kiln_storage_of(t);
  assert_int_equal(kiln_resize_(t, 1, V(5)), KILN_OK); /* smaller: same storage */
  check_view(t, 1, V(5), V(1), 0);
  assert_int_equal(kiln_storage_numel(s), 12);
  assert_int_equal(kiln_resize_(t, 3, V(2, 0, 9)), KILN_OK); /* empty: never grows */
  check_view(t, 3, V(2, 0, 9), V(9, 9, 1), 0);
  assert_int_equal(kiln_storage_numel(s), 12);
  kiln_tensor *tr = kiln_transpose(kiln_zeros(KILN_F32, 2, V(2, 3)), 0, 1);
  assert_int_equal(kiln_resize_(tr, 2, V(3, 2)), KILN_OK); /* same sizes keep strides (Torch) */
  check_view(tr, 2, V(3, 2), V(1, 3), 0);
  kiln_tensor *n = kiln_narrow(kiln_zeros(KILN_F32, 1, V(10)), 0, 4, 2);
  assert_int_equal(kiln_resize_(n, 2, V(2, 3)), KILN_OK); /* offset 4 + 6 = 10: fits */
  check_view(n, 2, V(2, 3), V(3, 1), 4);
  kiln_tensor *sc = kiln_scalar(KILN_F32, 1);
  assert_int_equal(kiln_resize_(sc, 0, NULL), KILN_OK);
  check_view(sc, 0, NULL, NULL, 0);
  expect_no_error();
  assert_int_equal(kiln_resize_(t, 2, V(2, -1)), KILN_ERR_SHAPE);
  expect_error(KILN_ERR_SHAPE, "kiln_resize_", "[2, -1]", NULL);
  assert_int_equal(kiln_resize_(t, 17, V(1)), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_resize_", "ndim 17", NULL);
  assert_int_equal(kiln_resize_(NULL, 1, V(1)), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_resize_", NULL);
  check_view(t, 3, V(2, 0, 9), V(9, 9, 1), 0); /* unchanged by the errors */
  kiln_storage_release(s);
  kiln_scope_end();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_dtype_helpers),   cmocka_unit_test(test_constants_shapes),
      cmocka_unit_test(test_sizes_errors),    cmocka_unit_test(test_arange_shapes),
      cmocka_unit_test(test_arange_errors),   cmocka_unit_test(test_linspace_shapes),
      cmocka_unit_test(test_random_shapes),   cmocka_unit_test(test_from_data_and_blob_shapes),
      cmocka_unit_test(test_from_blob_deleter), cmocka_unit_test(test_storages),
      cmocka_unit_test(test_set),             cmocka_unit_test(test_resize_shapes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
