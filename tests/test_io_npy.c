/*
 * test_io_npy.c — kiln_save_npy / kiln_load_npy: bit-exact round trips of
 * every dtype (special values, 0-d, empty, views), the exact bytes Kiln
 * writes, hand-made files (versions 2.0/3.0, fortran order, big-endian,
 * Python 2 headers), and every error path: truncation at every length,
 * corrupt headers, unsupported dtypes, missing and unwritable paths.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "kiln/kiln.h"
#include "file_util.h"
#include "test_util.h"

static int make_dir(void **state) { return test_dir_make("npy"); }

/* A version 1.0 file: the given header text (padded by the caller or not)
 * followed by `data`. */
static void write_npy(const char *path, int major, const char *header, const void *data, size_t nbytes) {
  size_t h = strlen(header), pre = major == 1 ? 10 : 12;
  unsigned char *b = malloc(pre + h + nbytes + 1);
  memcpy(b, "\x93NUMPY", 6);
  b[6] = (unsigned char)major;
  b[7] = 0;
  b[8] = (unsigned char)(h & 0xff);
  b[9] = (unsigned char)(h >> 8);
  if (major > 1) b[10] = b[11] = 0;
  memcpy(b + pre, header, h);
  if (nbytes) memcpy(b + pre + h, data, nbytes);
  spit(path, b, pre + h + nbytes);
  free(b);
}

/* t's elements (row-major) equal `bytes` byte for byte. */
static void expect_bytes(kiln_tensor *t, const void *bytes, size_t n) {
  assert_non_null(t);
  unsigned char got[512];
  assert_true(n <= sizeof got);
  assert_int_equal(kiln_numel(t) * (int64_t)kiln_dtype_size(kiln_dtype_of(t)), (int64_t)n);
  assert_int_equal(kiln_read(t, got, sizeof got), KILN_OK);
  assert_memory_equal(got, bytes, n);
}

static void expect_sizes(kiln_tensor *t, int ndim, const int64_t *sizes) {
  assert_non_null(t);
  assert_int_equal(kiln_dim(t), ndim);
  for (int d = 0; d < ndim; d++) assert_int_equal(kiln_size(t, d), sizes[d]);
}

/* Special values of each dtype as raw bytes (8 elements). */
static size_t special_bytes(kiln_dtype d, unsigned char *out) {
  switch (d) {
  case KILN_BOOL: memcpy(out, (uint8_t[]){0, 1, 1, 0, 1, 0, 0, 1}, 8); return 8;
  case KILN_U8: memcpy(out, (uint8_t[]){0, 1, 127, 128, 255, 7, 200, 3}, 8); return 8;
  case KILN_I8: memcpy(out, (int8_t[]){-128, 127, -1, 0, 1, 5, -77, 99}, 8); return 8;
  case KILN_I16: memcpy(out, (int16_t[]){-32768, 32767, -1, 0, 1, 300, -3000, 12345}, 16); return 16;
  case KILN_I32: memcpy(out, (int32_t[]){INT32_MIN, INT32_MAX, -1, 0, 1, 70000, -70000, 5}, 32); return 32;
  case KILN_I64:
    memcpy(out, (int64_t[]){INT64_MIN, INT64_MAX, -1, 0, 1, 1LL << 53 | 1, -(1LL << 60), 5}, 64);
    return 64;
  case KILN_F16: /* +0, -0, inf, -inf, qNaN with payload, sNaN, subnormal, max */
  case KILN_BF16:
    memcpy(out, (uint16_t[]){0x0000, 0x8000, 0x7c00, 0xfc00, 0x7e5a, 0xfd01, 0x0001, 0x7bff}, 16);
    return 16;
  case KILN_F32:
    memcpy(out, (uint32_t[]){0, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc12345u, 0xffa00001u, 1, 0x7f7fffffu}, 32);
    return 32;
  case KILN_F64:
    memcpy(out,
           (uint64_t[]){0, 1ull << 63, 0x7ff0000000000000ull, 0xfff0000000000000ull, 0x7ff8dead0000beefull,
                        0xfff4000000000001ull, 1, 0x7fefffffffffffffull},
           64);
    return 64;
  default: fail();
  }
  return 0;
}

static void roundtrip_every_dtype(void **state) {
  const char *p = path_of("rt.npy");
  for (int d = 0; d < KILN_DTYPE_COUNT; d++) {
    if (d == KILN_BF16) continue;
    unsigned char bytes[64];
    size_t n = special_bytes((kiln_dtype)d, bytes);
    kiln_tensor *t = kiln_from_data((kiln_dtype)d, 2, (int64_t[]){2, 4}, bytes);
    assert_int_equal(kiln_save_npy(t, p), KILN_OK);
    kiln_tensor *u = kiln_load_npy(p);
    expect_no_error();
    assert_int_equal(kiln_dtype_of(u), d);
    expect_sizes(u, 2, (int64_t[]){2, 4});
    assert_true(kiln_is_contiguous(u));
    expect_bytes(u, bytes, n);
    kiln_release(t);
    kiln_release(u);
  }
}

static void zero_dim_and_empty(void **state) {
  const char *p = path_of("shapes.npy");
  kiln_scope_begin();
  kiln_tensor *s = kiln_scalar(KILN_F64, -2.5);
  assert_int_equal(kiln_save_npy(s, p), KILN_OK);
  kiln_tensor *u = kiln_load_npy(p);
  expect_sizes(u, 0, NULL);
  assert_float_equal(kiln_item(u), -2.5, 0);
  int64_t shapes[3][3] = {{0}, {2, 0, 3}, {1, 1, 1}};
  int ndims[3] = {1, 3, 3};
  for (int i = 0; i < 3; i++) {
    kiln_tensor *e = kiln_zeros(KILN_I16, ndims[i], shapes[i]);
    assert_int_equal(kiln_save_npy(e, p), KILN_OK);
    kiln_tensor *v = kiln_load_npy(p);
    expect_no_error();
    expect_sizes(v, ndims[i], shapes[i]);
    assert_int_equal(kiln_numel(v), kiln_numel(e));
  }
  kiln_scope_end();
}

/* A transposed, a narrowed-with-step and an expanded view are written as
 * the row-major values they show. */
static void views_written_row_major(void **state) {
  const char *p = path_of("views.npy");
  kiln_scope_begin();
  kiln_tensor *x = kiln_arange(KILN_I32, 0, 12, 1);
  kiln_tensor *m = kiln_view(x, 2, (int64_t[]){3, 4});
  kiln_tensor *views[3] = {kiln_t(m), kiln_slice(m, 1, 0, 4, 3),
                           kiln_expand(kiln_narrow(x, 0, 5, 2), 2, (int64_t[]){3, 2})};
  int32_t want[3][12] = {{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}, {0, 3, 4, 7, 8, 11}, {5, 6, 5, 6, 5, 6}};
  for (int i = 0; i < 3; i++) {
    assert_int_equal(kiln_save_npy(views[i], p), KILN_OK);
    kiln_tensor *u = kiln_load_npy(p);
    expect_no_error();
    assert_true(kiln_is_same_size(u, views[i]));
    expect_bytes(u, want[i], (size_t)kiln_numel(u) * 4);
  }
  /* a pending (lazy) tensor is forced */
  assert_int_equal(kiln_save_npy(kiln_mul_scalar(m, 2), p), KILN_OK);
  kiln_tensor *u = kiln_load_npy(p);
  expect_values_tol(u, (double[]){0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22}, 12, 0);
  kiln_scope_end();
}

/* The exact bytes: magic, version 1.0, header length, header text, padding
 * to a multiple of 64, '\n', then the data. */
static void exact_file_bytes(void **state) {
  const char *p = path_of("exact.npy");
  kiln_tensor *t = kiln_from_data(KILN_F32, 1, (int64_t[]){3}, (float[]){1, 2, 3});
  assert_int_equal(kiln_save_npy(t, p), KILN_OK);
  size_t n;
  unsigned char *b = slurp(p, &n);
  assert_int_equal(n, 128 + 12);
  assert_memory_equal(b, "\x93NUMPY\x01\x00", 8);
  assert_int_equal(b[8] | b[9] << 8, 118);
  const char *text = "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }";
  assert_memory_equal(b + 10, text, strlen(text));
  for (size_t i = 10 + strlen(text); i < 127; i++) assert_int_equal(b[i], ' ');
  assert_int_equal(b[127], '\n');
  float data[3];
  memcpy(data, b + 128, 12);
  assert_true(data[0] == 1 && data[1] == 2 && data[2] == 3);
  free(b);
  kiln_release(t);
  /* shapes of 0-d and 2-d tensors, descr of bool and i8 */
  const char *texts[] = {"{'descr': '|b1', 'fortran_order': False, 'shape': (), }",
                         "{'descr': '|i1', 'fortran_order': False, 'shape': (2, 0), }"};
  kiln_tensor *ts[] = {kiln_scalar(KILN_BOOL, 1), kiln_zeros(KILN_I8, 2, (int64_t[]){2, 0})};
  for (int i = 0; i < 2; i++) {
    assert_int_equal(kiln_save_npy(ts[i], p), KILN_OK);
    b = slurp(p, &n);
    assert_memory_equal(b + 10, texts[i], strlen(texts[i]));
    assert_int_equal((10 + (b[8] | b[9] << 8)) % 64, 0);
    free(b);
    kiln_release(ts[i]);
  }
}

static void bf16_refused(void **state) {
  const char *p = path_of("bf16.npy");
  kiln_tensor *t = kiln_ones(KILN_BF16, 1, (int64_t[]){2});
  assert_int_equal(kiln_save_npy(t, p), KILN_ERR_DTYPE);
  expect_error(KILN_ERR_DTYPE, "kiln_save_npy", "bf16", "KILN_F32", NULL);
  assert_false(exists(p));
  kiln_release(t);
}

/* Files NumPy (or other writers) produce that Kiln's writer does not. */
static void handmade_files(void **state) {
  const char *p = path_of("hand.npy");
  /* version 2.0 and 3.0, double quotes, no trailing newline, extra spaces */
  int16_t v[6] = {1, -2, 3, -4, 5, -6};
  for (int major = 2; major <= 3; major++) {
    write_npy(p, major, "{\"descr\" : \"<i2\" , \"shape\":(2,3) ,\"fortran_order\":False}", v, 12);
    kiln_tensor *t = kiln_load_npy(p);
    expect_no_error();
    expect_sizes(t, 2, (int64_t[]){2, 3});
    expect_bytes(t, v, 12);
    kiln_release(t);
  }
  /* fortran order: a column-major view with the right values */
  write_npy(p, 1, "{'descr': '<i2', 'fortran_order': True, 'shape': (2, 3), }\n", v, 12);
  kiln_tensor *t = kiln_load_npy(p);
  expect_no_error();
  expect_sizes(t, 2, (int64_t[]){2, 3});
  assert_int_equal(kiln_stride(t, 0), 1);
  assert_int_equal(kiln_stride(t, 1), 2);
  expect_values_tol(t, (double[]){1, 3, 5, -2, -4, -6}, 6, 0);
  kiln_release(t);
  /* big-endian data is byte-swapped; Python 2 'L' suffixes */
  unsigned char be[8] = {0x3f, 0x80, 0, 0, 0xc0, 0, 0, 0}; /* 1.0f, -2.0f */
  write_npy(p, 1, "{'descr': '>f4', 'fortran_order': False, 'shape': (2L,), }\n", be, 8);
  t = kiln_load_npy(p);
  expect_no_error();
  expect_values_tol(t, (double[]){1, -2}, 2, 0);
  kiln_release(t);
  /* a 3-d fortran file */
  int8_t c[12];
  for (int i = 0; i < 12; i++) c[i] = (int8_t)i;
  write_npy(p, 1, "{'descr': '|i1', 'fortran_order': True, 'shape': (2, 3, 2), }", c, 12);
  t = kiln_load_npy(p);
  /* element (i, j, k) is at i + 2j + 6k */
  expect_values_tol(t, (double[]){0, 6, 2, 8, 4, 10, 1, 7, 3, 9, 5, 11}, 12, 0);
  kiln_release(t);
  /* bool bytes other than 0/1 load as true; bytes after the data ignored */
  write_npy(p, 1, "{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }", (uint8_t[]){0, 2, 255, 9}, 4);
  t = kiln_load_npy(p);
  expect_bytes(t, (uint8_t[]){0, 1, 1}, 3);
  kiln_release(t);
}

/* Every prefix of a valid file fails cleanly with KILN_ERR_IO. */
static void truncated_every_length(void **state) {
  const char *p = path_of("full.npy"), *q = path_of("cut.npy");
  kiln_tensor *t = kiln_arange(KILN_I16, 0, 6, 1);
  assert_int_equal(kiln_save_npy(t, p), KILN_OK);
  size_t n;
  unsigned char *b = slurp(p, &n);
  assert_int_equal(n, 128 + 12);
  for (size_t len = 0; len < n; len++) {
    spit(q, b, len);
    assert_null(kiln_load_npy(q));
    if (kiln_last_status() != KILN_ERR_IO) fail_msg("length %zu: %s", len, kiln_last_error());
    expect_error(KILN_ERR_IO, "kiln_load_npy", q, NULL);
  }
  spit(q, b, n);
  kiln_tensor *u = kiln_load_npy(q);
  expect_values_tol(u, (double[]){0, 1, 2, 3, 4, 5}, 6, 0);
  kiln_release(u);
  kiln_release(t);
  free(b);
}

typedef struct bad_header {
  const char *header;
  kiln_status status;
  const char *needle;
} bad_header;

static void corrupt_headers(void **state) {
  const char *p = path_of("bad.npy");
  static const bad_header cases[] = {
      {"['descr', 'fortran_order', 'shape']", KILN_ERR_IO, "not a dict"},
      {"{'descr': '<f4', 'fortran_order': False}", KILN_ERR_IO, "missing key"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}", KILN_ERR_IO, "unknown key"},
      {"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}", KILN_ERR_IO, "repeated key"},
      {"{'descr': '<f4', 'fortran_order': 0, 'shape': (2,)}", KILN_ERR_IO, "True or False"},
      {"{'descr': '<f4', 'fortran_order': Falsey, 'shape': (2,)}", KILN_ERR_IO, "True or False"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2)}", KILN_ERR_IO, "trailing comma"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': [2]}", KILN_ERR_IO, "not a tuple"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (-2,)}", KILN_ERR_IO, "non-negative"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 'a')}", KILN_ERR_IO, "non-negative"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}", KILN_ERR_IO, "too large"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296)}", KILN_ERR_IO, "overflows"},
      /* empty, but the strides of the other dims overflow (fuzz_npy found
       * the signed overflow in graph_contiguous_strides) */
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776, 0, 1099511627776)}", KILN_ERR_IO,
       "overflows"},
      {"{'descr': '<f4', 'fortran_order': True, 'shape': (0, 1099511627776, 1099511627776)}", KILN_ERR_IO,
       "overflows"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,)} x", KILN_ERR_IO, "after the dict"},
      {"{'descr': '<f4, 'fortran_order': False, 'shape': (2,)}", KILN_ERR_IO, "expected ',' or '}'"},
      {"{'descr' '<f4', 'fortran_order': False, 'shape': (2,)}", KILN_ERR_IO, "expected ':'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,)", KILN_ERR_IO, "expected ',' or '}'"},
      {"{'descr': '<f\\x34', 'fortran_order': False, 'shape': (2,)}", KILN_ERR_IO, "escape"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,", KILN_ERR_IO, "malformed"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'descr", KILN_ERR_IO, "unterminated"},
      {"", KILN_ERR_IO, "not a dict"},
      {"{'descr': '<m8', 'fortran_order': False, 'shape': (2,)}", KILN_ERR_DTYPE, "'<m8'"},
      {"{'descr': '<u3', 'fortran_order': False, 'shape': (2,)}", KILN_ERR_DTYPE, "'<u3'"},
      {"{'descr': '<c8', 'fortran_order': False, 'shape': (2,)}", KILN_ERR_DTYPE, "no Kiln dtype"},
      {"{'descr': '|O', 'fortran_order': False, 'shape': (2,)}", KILN_ERR_DTYPE, "'|O'"},
      {"{'descr': '<U5', 'fortran_order': False, 'shape': (2,)}", KILN_ERR_DTYPE, "'<U5'"},
      {"{'descr': [('a', '<f4'), ('b', [('c', '<i2')])], 'fortran_order': False, 'shape': (2,)}", KILN_ERR_DTYPE,
       "structured"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1)}", KILN_ERR_UNSUPPORTED,
       "17 dims"},
  };
  float data[2] = {1, 2};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    write_npy(p, 1, cases[i].header, data, sizeof data);
    assert_null(kiln_load_npy(p));
    if (kiln_last_status() != cases[i].status || !strstr(kiln_last_error(), cases[i].needle))
      fail_msg("header %s: got %s: %s", cases[i].header, kiln_status_name(kiln_last_status()), kiln_last_error());
    kiln_clear_error();
  }
}

static void bad_preamble(void **state) {
  const char *p = path_of("pre.npy");
  const char *h = "{'descr': '<f4', 'fortran_order': False, 'shape': (0,)}";
  write_npy(p, 4, h, NULL, 0);
  assert_null(kiln_load_npy(p));
  expect_error(KILN_ERR_IO, "unsupported .npy format version 4.0", NULL);
  write_npy(p, 1, h, NULL, 0);
  size_t n;
  unsigned char *b = slurp(p, &n);
  b[7] = 1; /* version 1.1 */
  spit(p, b, n);
  assert_null(kiln_load_npy(p));
  expect_error(KILN_ERR_IO, "version 1.1", NULL);
  b[7] = 0;
  b[0] = 'X'; /* magic */
  spit(p, b, n);
  assert_null(kiln_load_npy(p));
  expect_error(KILN_ERR_IO, "not a .npy file", NULL);
  b[0] = 0x93;
  b[8] = 0xff; /* header length past the end of the file */
  spit(p, b, n);
  assert_null(kiln_load_npy(p));
  expect_error(KILN_ERR_IO, "truncated", "header", NULL);
  free(b);
  /* a version 2.0 header length beyond the limit */
  unsigned char big[12] = {0x93, 'N', 'U', 'M', 'P', 'Y', 2, 0, 0, 0, 0, 0x10};
  spit(p, big, sizeof big);
  assert_null(kiln_load_npy(p));
  expect_error(KILN_ERR_IO, "header length", NULL);
}

static void path_errors(void **state) {
  kiln_tensor *t = kiln_zeros(KILN_F32, 1, (int64_t[]){2});
  assert_null(kiln_load_npy(path_of("missing.npy")));
  expect_error(KILN_ERR_IO, "kiln_load_npy", "missing.npy", "No such file", NULL);
  assert_null(kiln_load_npy(test_dir));
  expect_error(KILN_ERR_IO, "not a regular file", NULL);
  assert_null(kiln_load_npy(NULL));
  expect_error(KILN_ERR_ARG, "path is NULL", NULL);
  assert_int_equal(kiln_save_npy(t, "/nonexistent_kiln_dir/x.npy"), KILN_ERR_IO);
  expect_error(KILN_ERR_IO, "kiln_save_npy", "cannot create", "/nonexistent_kiln_dir/x.npy", NULL);
  assert_int_equal(kiln_save_npy(t, test_dir), KILN_ERR_IO);
  expect_error(KILN_ERR_IO, "cannot create", NULL);
  assert_int_equal(kiln_save_npy(t, NULL), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "path is NULL", NULL);
  assert_int_equal(kiln_save_npy(NULL, path_of("null.npy")), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_save_npy", NULL);
  assert_false(exists(path_of("null.npy")));
  kiln_release(t);
}

/* A write that fails half way (file size limit) reports KILN_ERR_IO and
 * removes the partial file. */
static void failed_write_removes_file(void **state) {
  const char *p = path_of("big.npy");
  kiln_tensor *t = kiln_zeros(KILN_F64, 1, (int64_t[]){100000});
  assert_int_equal(kiln_realize(t), KILN_OK);
  struct rlimit old, lim;
  assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
  lim = old;
  lim.rlim_cur = 4096;
  void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
  int st = kiln_save_npy(t, p);
  setrlimit(RLIMIT_FSIZE, &old);
  signal(SIGXFSZ, prev);
  assert_int_equal(st, KILN_ERR_IO);
  expect_error(KILN_ERR_IO, "kiln_save_npy", "writing", NULL);
  assert_false(exists(p));
  kiln_release(t);
}

/* The first error is kept; a failed load returns NULL into a chain. */
static void errors_chain(void **state) {
  kiln_scope_begin();
  kiln_tensor *x = kiln_add_scalar(kiln_load_npy(path_of("nope.npy")), 1);
  assert_null(x);
  expect_error(KILN_ERR_IO, "kiln_load_npy", NULL);
  kiln_scope_end();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(roundtrip_every_dtype),
      cmocka_unit_test(zero_dim_and_empty),
      cmocka_unit_test(views_written_row_major),
      cmocka_unit_test(exact_file_bytes),
      cmocka_unit_test(bf16_refused),
      cmocka_unit_test(handmade_files),
      cmocka_unit_test(truncated_every_length),
      cmocka_unit_test(corrupt_headers),
      cmocka_unit_test(bad_preamble),
      cmocka_unit_test(path_errors),
      cmocka_unit_test(failed_write_removes_file),
      cmocka_unit_test(errors_chain),
  };
  return cmocka_run_group_tests(tests, make_dir, test_dir_remove);
}
