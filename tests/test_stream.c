/*
 * test_stream.c — streaming (nontemporal) stores of large outputs, at the
 * engine level. KILN_STREAM_BYTES is set to 4096 before the first kernel
 * is lowered, so small tensors take the streaming path: which stores the
 * kernel IR flags (a row kernel, softmax, keeps plain stores), and the
 * values of kernels whose outputs stream, in several dtypes (BOOL outputs
 * too), shapes whose rows are or are not 64-byte multiples, transposed
 * reads (tiles) and multi-output kernels, each checked element by element
 * against a plain C loop. Inputs differ from element to element (random
 * integers, or ramps with a nonzero step), so a load at a wrong index
 * shows.
 */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kiln/kiln.h"
#include "passes.h"
#include "rt_internal.h"
#include "kernel_util.h"
#include "test_util.h"

/* Nontemporal and plain STOREs of the kernel that would compute t. */
static void count_stores(kiln_tensor *t, int *streaming, int *plain) {
  kir_kernel k;
  lower_for_test(t, &k);
  *streaming = *plain = 0;
  for (int i = 0; i < k.n_uops; i++)
    if (k.uops[i].op == KIR_STORE) ++*(k.uops[i].nontemporal ? streaming : plain);
  kir_free(&k);
}

static kiln_tensor *ramp(kiln_dtype t, int ndim, const int64_t *sizes, double start, double step) {
  int64_t numel = 1;
  for (int d = 0; d < ndim; d++) numel *= sizes[d];
  kiln_tensor *r = kiln_arange(KILN_F64, 0, (double)numel, 1);
  return kiln_to_dtype(kiln_add_scalar(kiln_mul_scalar(kiln_view(r, ndim, sizes), step), start), t);
}

/* Outputs of 4096 bytes or more stream; smaller ones, and a softmax that
 * keeps exp(x - max) in its output for the epilogue, do not. */
static void which_stores_stream(void **state) {
  (void)state;
  rt_set_fusion(1); /* KILN_FUSE=0 would lower softmax's division alone */
  kiln_scope_begin();
  int s, p;
  count_stores(kiln_relu(ramp(KILN_F32, 1, (int64_t[]){1024}, -5, 1)), &s, &p);
  assert_int_equal(s, 1);
  assert_int_equal(p, 0);
  count_stores(kiln_relu(ramp(KILN_F32, 1, (int64_t[]){1023}, -5, 1)), &s, &p);
  assert_int_equal(s, 0);
  assert_int_equal(p, 1);
  count_stores(kiln_softmax(ramp(KILN_F32, 2, (int64_t[]){64, 100}, 0, 0.01), 1), &s, &p);
  assert_int_equal(s, 0);
  kiln_scope_end();
  rt_set_fusion(-1);
  expect_no_error();
}

/* Integers in [lo, hi] from a fixed-seed generator (xorshift64*): exact
 * in every dtype used here, different from element to element. */
static void random_ints(double *v, int64_t n, int64_t lo, int64_t hi, uint64_t seed) {
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (int64_t i = 0; i < n; i++) {
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    v[i] = (double)(lo + (int64_t)((x * 0x2545f4914f6cdd1dull) >> 33) % (hi - lo + 1));
  }
}

/* The values v [n] as a realized tensor of dtype t and the given sizes. */
static kiln_tensor *realized(kiln_dtype t, int ndim, const int64_t *sizes, const double *v) {
  kiln_tensor *x = kiln_to_dtype(kiln_from_data(KILN_F64, ndim, sizes, v), t);
  assert_int_equal(kiln_realize(x), KILN_OK);
  return x;
}

/* relu(a*b + c) over n elements of dtype t (2 threads, so each chunk's
 * rounded bounds are exercised), a, b, c random integers (products and
 * sums exact in t), every element exact against C; and a > c, a BOOL
 * output, every element. */
static void check_w1(kiln_dtype t, int ndim, const int64_t *sizes) {
  kiln_scope_begin();
  int64_t n = 1;
  for (int d = 0; d < ndim; d++) n *= sizes[d];
  double *va = malloc((size_t)n * sizeof *va), *vb = malloc((size_t)n * sizeof *vb), *vc = malloc((size_t)n * sizeof *vc);
  assert_non_null(va);
  assert_non_null(vb);
  assert_non_null(vc);
  random_ints(va, n, -100, 100, 1 + (uint64_t)n);
  random_ints(vb, n, -30, 30, 2 + (uint64_t)n);
  random_ints(vc, n, -1000, 1000, 3 + (uint64_t)n);
  kiln_tensor *a = realized(t, ndim, sizes, va), *b = realized(t, ndim, sizes, vb), *c = realized(t, ndim, sizes, vc);
  kiln_tensor *y = kiln_to_dtype(kiln_relu(kiln_add(kiln_mul(a, b), c)), KILN_F64);
  int streaming, plain;
  count_stores(y, &streaming, &plain);
  assert_int_equal(streaming, 1); /* the output streams */
  assert_int_equal(kiln_realize(y), KILN_OK);
  assert_int_equal(kiln_numel(y), n);
  const double *got = kiln_data(y);
  for (int64_t i = 0; i < n; i++) {
    double want = fmax(va[i] * vb[i] + vc[i], 0);
    if (got[i] != want) fail_msg("dtype %d element %lld: %g, want %g", t, (long long)i, got[i], want);
  }
  kiln_tensor *gt = kiln_gt(a, c); /* a BOOL output: one byte per element */
  assert_int_equal(kiln_realize(gt), KILN_OK);
  const uint8_t *g = kiln_data(gt);
  for (int64_t i = 0; i < n; i++)
    if (g[i] != (va[i] > vc[i])) fail_msg("dtype %d gt element %lld: %d, want %d", t, (long long)i, g[i], va[i] > vc[i]);
  free(va);
  free(vb);
  free(vc);
  kiln_scope_end();
}

static void streamed_values(void **state) {
  (void)state;
  assert_int_equal(kiln_set_num_threads(2), KILN_OK);
  kiln_dtype types[] = {KILN_F32, KILN_F64, KILN_I32};
  for (int i = 0; i < 3; i++) {
    check_w1(types[i], 1, (int64_t[]){100003});
    check_w1(types[i], 2, (int64_t[]){333, 77}); /* rows of 77 elements: not 64-byte multiples */
    check_w1(types[i], 3, (int64_t[]){3, 64, 96});
  }
  expect_no_error();
}

/* a.T + b[None, :] (tiled, transposed reads) and a multi-output kernel
 * (a+b and a-b forced together) with streaming stores. */
static void streamed_tiles_and_outputs(void **state) {
  (void)state;
  kiln_scope_begin();
  int64_t sq[2] = {128, 96}, tr[2] = {96, 128};
  kiln_tensor *a = ramp(KILN_F32, 2, sq, 0, 1), *b = ramp(KILN_F32, 1, (int64_t[]){128}, 0.5, 1);
  kiln_tensor *y = kiln_add(kiln_t(a), b);
  assert_int_equal(kiln_realize(y), KILN_OK);
  const float *got = kiln_data(y);
  for (int64_t i = 0; i < tr[0]; i++)
    for (int64_t j = 0; j < tr[1]; j++) assert_true(got[i * tr[1] + j] == (float)(j * sq[1] + i) + (float)j + 0.5f);
  kiln_tensor *x = ramp(KILN_F32, 1, (int64_t[]){5000}, -7, 0.5), *z = ramp(KILN_F32, 1, (int64_t[]){5000}, 3, 0.25);
  kiln_tensor *both[2] = {kiln_add(x, z), kiln_sub(x, z)};
  assert_int_equal(kiln_realize_many(both, 2), KILN_OK);
  const float *s = kiln_data(both[0]), *d = kiln_data(both[1]);
  for (int i = 0; i < 5000; i++) {
    float xi = -7 + 0.5f * (float)i, zi = 3 + 0.25f * (float)i;
    assert_true(s[i] == xi + zi);
    assert_true(d[i] == xi - zi);
  }
  kiln_scope_end();
  expect_no_error();
}

int main(void) {
  setenv("KILN_STREAM_BYTES", "4096", 1);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(which_stores_stream),
      cmocka_unit_test(streamed_values),
      cmocka_unit_test(streamed_tiles_and_outputs),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
