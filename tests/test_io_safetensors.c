/*
 * test_io_safetensors.c — kiln_save_safetensors, kiln_load_safetensors,
 * kiln_load_safetensor, kiln_safetensors_free: bit-exact round trips of
 * every dtype (BF16 included), views, the exact header Kiln writes and its
 * data layout, scope ownership, and every error path: argument errors on
 * save, truncation at every length, bad JSON, bad entries, offsets out of
 * range, holes and overlaps, unknown and unsupported dtype strings,
 * missing and unwritable paths.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "kiln/kiln.h"
#include "file_util.h"
#include "test_util.h"

static int make_dir(void **state) { return test_dir_make("st"); }

/* A file with header text `json` (its length as N) and `nbytes` of data. */
static void write_st(const char *path, const char *json, const void *data, size_t nbytes) {
  size_t h = strlen(json);
  unsigned char *b = malloc(8 + h + nbytes);
  for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)h >> (8 * i));
  memcpy(b + 8, json, h);
  if (nbytes) memcpy(b + 8 + h, data, nbytes);
  spit(path, b, 8 + h + nbytes);
  free(b);
}

static void expect_bytes(kiln_tensor *t, const void *bytes, size_t n) {
  assert_non_null(t);
  unsigned char got[512];
  assert_true(n <= sizeof got);
  assert_int_equal(kiln_numel(t) * (int64_t)kiln_dtype_size(kiln_dtype_of(t)), (int64_t)n);
  assert_int_equal(kiln_read(t, got, sizeof got), KILN_OK);
  assert_memory_equal(got, bytes, n);
}

static size_t special_bytes(kiln_dtype d, unsigned char *out) {
  switch (d) {
  case KILN_BOOL: memcpy(out, (uint8_t[]){0, 1, 1, 0, 1, 0}, 6); return 6;
  case KILN_U8: memcpy(out, (uint8_t[]){0, 1, 127, 128, 255, 7}, 6); return 6;
  case KILN_I8: memcpy(out, (int8_t[]){-128, 127, -1, 0, 1, 5}, 6); return 6;
  case KILN_I16: memcpy(out, (int16_t[]){-32768, 32767, -1, 0, 1, 300}, 12); return 12;
  case KILN_I32: memcpy(out, (int32_t[]){INT32_MIN, INT32_MAX, -1, 0, 1, 70000}, 24); return 24;
  case KILN_I64: memcpy(out, (int64_t[]){INT64_MIN, INT64_MAX, -1, 0, 1LL << 53 | 1, -(1LL << 60)}, 48); return 48;
  case KILN_F16:
  case KILN_BF16: memcpy(out, (uint16_t[]){0x0000, 0x8000, 0x7f80, 0xff81, 0x7fc1, 0x0001}, 12); return 12;
  case KILN_F32: memcpy(out, (uint32_t[]){0, 0x80000000u, 0x7f800000u, 0x7fc12345u, 0xffa00001u, 1}, 24); return 24;
  case KILN_F64:
    memcpy(out, (uint64_t[]){0, 1ull << 63, 0x7ff0000000000000ull, 0x7ff8dead0000beefull, 0xfff4000000000001ull, 1},
           48);
    return 48;
  default: fail();
  }
  return 0;
}

static const char *const dtype_strings[KILN_DTYPE_COUNT] = {"BOOL", "U8",  "I8",   "I16", "I32",
                                                            "I64",  "F16", "BF16", "F32", "F64"};

/* Every dtype in one file, in a shuffled order; names and order kept. */
static void roundtrip_every_dtype(void **state) {
  const char *p = path_of("all.safetensors");
  kiln_tensor *ts[KILN_DTYPE_COUNT];
  const char *names[KILN_DTYPE_COUNT];
  unsigned char bytes[KILN_DTYPE_COUNT][64];
  size_t nbytes[KILN_DTYPE_COUNT];
  for (int i = 0; i < KILN_DTYPE_COUNT; i++) {
    kiln_dtype d = (kiln_dtype)((i * 3) % KILN_DTYPE_COUNT); /* 0 3 6 9 2 5 8 1 4 7 */
    nbytes[i] = special_bytes(d, bytes[i]);
    ts[i] = kiln_from_data(d, 2, (int64_t[]){2, 3}, bytes[i]);
    names[i] = dtype_strings[d];
  }
  assert_int_equal(kiln_save_safetensors(p, KILN_DTYPE_COUNT, names, ts), KILN_OK);
  int n = -1;
  char **got_names = NULL;
  kiln_tensor **got = NULL;
  assert_int_equal(kiln_load_safetensors(p, &n, &got_names, &got), KILN_OK);
  assert_int_equal(n, KILN_DTYPE_COUNT);
  for (int i = 0; i < n; i++) {
    assert_string_equal(got_names[i], names[i]);
    assert_int_equal(kiln_dtype_of(got[i]), kiln_dtype_of(ts[i]));
    assert_true(kiln_is_same_size(got[i], ts[i]));
    expect_bytes(got[i], bytes[i], nbytes[i]);
    /* one by name gives the same */
    kiln_tensor *one = kiln_load_safetensor(p, names[i]);
    expect_no_error();
    expect_bytes(one, bytes[i], nbytes[i]);
    kiln_release(one);
  }
  kiln_safetensors_free(n, got_names, got);
  for (int i = 0; i < KILN_DTYPE_COUNT; i++) kiln_release(ts[i]);
}

/* The exact bytes: header size, compact JSON in the given order, padding
 * to a multiple of 8, larger elements first in the data. */
static void exact_file_bytes(void **state) {
  const char *p = path_of("exact.safetensors");
  kiln_tensor *a = kiln_from_data(KILN_U8, 1, (int64_t[]){3}, (uint8_t[]){7, 8, 9});
  kiln_tensor *b = kiln_from_data(KILN_F64, 0, NULL, (double[]){-0.0});
  kiln_tensor *ts[2] = {a, b};
  assert_int_equal(kiln_save_safetensors(p, 2, (const char *[]){"a", "b"}, ts), KILN_OK);
  size_t n;
  unsigned char *f = slurp(p, &n);
  const char *json = "{\"a\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[8,11]},"
                     "\"b\":{\"dtype\":\"F64\",\"shape\":[],\"data_offsets\":[0,8]}}";
  size_t h = strlen(json), padded = (h + 7) / 8 * 8;
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = hlen << 8 | f[i];
  assert_int_equal(hlen, padded);
  assert_int_equal(n, 8 + padded + 11);
  assert_memory_equal(f + 8, json, h);
  for (size_t i = h; i < padded; i++) assert_int_equal(f[8 + i], ' ');
  double z;
  memcpy(&z, f + 8 + padded, 8);
  assert_true(z == 0 && signbit(z));
  assert_memory_equal(f + 8 + padded + 8, "\x07\x08\x09", 3);
  free(f);
  kiln_release(a);
  kiln_release(b);
}

static void views_and_shapes(void **state) {
  const char *p = path_of("views.safetensors");
  kiln_scope_begin();
  kiln_tensor *m = kiln_view(kiln_arange(KILN_I16, 0, 12, 1), 2, (int64_t[]){3, 4});
  kiln_tensor *ts[5] = {kiln_t(m), kiln_expand(kiln_select(m, 1, 2), 2, (int64_t[]){2, 3}),
                        kiln_zeros(KILN_F32, 3, (int64_t[]){2, 0, 5}), kiln_scalar(KILN_BF16, 1.5),
                        kiln_add_scalar(m, 1) /* pending */};
  const char *names[5] = {"t", "expanded", "empty", "scalar", "pending"};
  assert_int_equal(kiln_save_safetensors(p, 5, names, ts), KILN_OK);
  kiln_tensor *t = kiln_load_safetensor(p, "t");
  expect_values_tol(t, (double[]){0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}, 12, 0);
  assert_true(kiln_is_contiguous(t));
  expect_values_tol(kiln_load_safetensor(p, "expanded"), (double[]){2, 6, 10, 2, 6, 10}, 6, 0);
  kiln_tensor *e = kiln_load_safetensor(p, "empty");
  assert_true(kiln_is_same_size(e, ts[2]));
  kiln_tensor *s = kiln_load_safetensor(p, "scalar");
  assert_int_equal(kiln_dim(s), 0);
  assert_float_equal(kiln_item(s), 1.5, 0);
  expect_values_tol(kiln_load_safetensor(p, "pending"), (double[]){1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, 12, 0);
  expect_no_error();
  kiln_scope_end();
}

/* load_safetensors' tensors belong to the arrays, not to the scope: free
 * inside a scope, a retained one outlives the free. */
static void ownership_in_scope(void **state) {
  const char *p = path_of("own.safetensors");
  kiln_tensor *x = kiln_arange(KILN_F32, 0, 4, 1);
  assert_int_equal(kiln_save_safetensors(p, 1, (const char *[]){"x"}, &x), KILN_OK);
  kiln_scope_begin();
  int n;
  char **names;
  kiln_tensor **ts;
  assert_int_equal(kiln_load_safetensors(p, &n, &names, &ts), KILN_OK);
  kiln_tensor *kept = kiln_retain(ts[0]);
  kiln_safetensors_free(n, names, ts);
  kiln_scope_end();
  expect_values_tol(kept, (double[]){0, 1, 2, 3}, 4, 0);
  kiln_release(kept);
  kiln_release(x);
  /* no tensors: NULL arrays; free of NULL is fine */
  assert_int_equal(kiln_save_safetensors(p, 0, NULL, NULL), KILN_OK);
  n = -1;
  names = (char **)&n;
  assert_int_equal(kiln_load_safetensors(p, &n, &names, &ts), KILN_OK);
  assert_int_equal(n, 0);
  assert_null(names);
  assert_null(ts);
  kiln_safetensors_free(n, names, ts);
  kiln_safetensors_free(0, NULL, NULL);
}

static void save_argument_errors(void **state) {
  const char *p = path_of("args.safetensors");
  kiln_tensor *x = kiln_zeros(KILN_F32, 1, (int64_t[]){2});
  kiln_tensor *two[2] = {x, x};
  assert_int_equal(kiln_save_safetensors(p, 2, (const char *[]){"w", "w"}, two), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_save_safetensors", "duplicate name 'w'", "tensors 0 and 1", NULL);
  assert_int_equal(kiln_save_safetensors(p, 2, (const char *[]){"w", NULL}, two), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "name 1 is NULL", NULL);
  assert_int_equal(kiln_save_safetensors(p, 2, (const char *[]){"a", "b"}, (kiln_tensor *[]){x, NULL}), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "tensor 1 ('b') is NULL", NULL);
  assert_int_equal(kiln_save_safetensors(p, 1, (const char *[]){"__metadata__"}, two), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "reserved", NULL);
  assert_int_equal(kiln_save_safetensors(p, 1, (const char *[]){"bad\xff"}, two), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "not valid UTF-8", NULL);
  assert_int_equal(kiln_save_safetensors(p, -1, NULL, NULL), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "n = -1", NULL);
  assert_int_equal(kiln_save_safetensors(p, 1, NULL, two), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "names NULL", NULL);
  assert_int_equal(kiln_save_safetensors(NULL, 1, (const char *[]){"a"}, two), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "path is NULL", NULL);
  assert_false(exists(p));
  assert_int_equal(kiln_save_safetensors("/nonexistent_kiln_dir/x.safetensors", 1, (const char *[]){"a"}, two),
                   KILN_ERR_IO);
  expect_error(KILN_ERR_IO, "cannot create", "/nonexistent_kiln_dir/x.safetensors", NULL);
  /* UTF-8 names are fine */
  assert_int_equal(kiln_save_safetensors(p, 1, (const char *[]){"caf\xc3\xa9.weight"}, two), KILN_OK);
  kiln_scope_begin();
  expect_values_tol(kiln_load_safetensor(p, "caf\xc3\xa9.weight"), (double[]){0, 0}, 2, 0);
  kiln_scope_end();
  kiln_release(x);
}

static void load_argument_errors(void **state) {
  const char *p = path_of("la.safetensors");
  kiln_tensor *x = kiln_zeros(KILN_F32, 1, (int64_t[]){2});
  assert_int_equal(kiln_save_safetensors(p, 1, (const char *[]){"x"}, &x), KILN_OK);
  int n = 7;
  char **names = NULL;
  kiln_tensor **ts = NULL;
  assert_int_equal(kiln_load_safetensors(p, NULL, &names, &ts), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "output pointer is NULL", NULL);
  assert_null(kiln_load_safetensor(p, "y"));
  expect_error(KILN_ERR_ARG, "kiln_load_safetensor", "no tensor named 'y'", NULL);
  assert_null(kiln_load_safetensor(p, "__metadata__"));
  expect_error(KILN_ERR_ARG, "no tensor named", NULL);
  assert_null(kiln_load_safetensor(p, NULL));
  expect_error(KILN_ERR_ARG, "name is NULL", NULL);
  assert_int_equal(kiln_load_safetensors(path_of("missing.safetensors"), &n, &names, &ts), KILN_ERR_IO);
  expect_error(KILN_ERR_IO, "kiln_load_safetensors", "missing.safetensors", "No such file", NULL);
  assert_null(kiln_load_safetensor(test_dir, "x"));
  expect_error(KILN_ERR_IO, "not a regular file", NULL);
  assert_int_equal(kiln_load_safetensors(NULL, &n, &names, &ts), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "path is NULL", NULL);
  assert_int_equal(n, 7); /* outputs untouched */
  assert_null(names);
  assert_null(ts);
  kiln_release(x);
}

/* Every prefix of a valid file fails with KILN_ERR_IO, as does a file
 * with trailing bytes. */
static void truncated_every_length(void **state) {
  const char *p = path_of("full.safetensors"), *q = path_of("cut.safetensors");
  kiln_tensor *ts[2] = {kiln_arange(KILN_I16, 0, 3, 1), kiln_scalar(KILN_F32, 2)};
  assert_int_equal(kiln_save_safetensors(p, 2, (const char *[]){"a", "b"}, ts), KILN_OK);
  size_t n;
  unsigned char *b = slurp(p, &n);
  for (size_t len = 0; len < n; len++) {
    spit(q, b, len);
    int cnt;
    char **names = NULL;
    kiln_tensor **got = NULL;
    if (kiln_load_safetensors(q, &cnt, &names, &got) != KILN_ERR_IO)
      fail_msg("length %zu of %zu: %s", len, n, kiln_last_error());
    expect_error(KILN_ERR_IO, "kiln_load_safetensors", q, NULL);
    assert_null(names);
    assert_null(kiln_load_safetensor(q, "a"));
    expect_error(KILN_ERR_IO, "kiln_load_safetensor", NULL);
  }
  unsigned char *longer = malloc(n + 1);
  memcpy(longer, b, n);
  longer[n] = 0;
  spit(q, longer, n + 1);
  assert_null(kiln_load_safetensor(q, "a"));
  expect_error(KILN_ERR_IO, "trailing bytes", NULL);
  spit(q, b, n);
  kiln_scope_begin();
  expect_values_tol(kiln_load_safetensor(q, "a"), (double[]){0, 1, 2}, 3, 0);
  kiln_scope_end();
  free(longer);
  free(b);
  kiln_release(ts[0]);
  kiln_release(ts[1]);
}

typedef struct bad_file {
  const char *json;
  size_t data_bytes;
  kiln_status status;
  const char *needle;
} bad_file;

static void corrupt_headers(void **state) {
  const char *p = path_of("bad.safetensors");
  static const bad_file cases[] = {
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}", 8, KILN_ERR_IO, "JSON"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},}", 8, KILN_ERR_IO, "JSON"},
      {"{\"a\":1,\"a\":2}", 0, KILN_ERR_IO, "duplicate"},
      {"[1, 2]", 0, KILN_ERR_IO, "start with '{'"},
      {" {}", 0, KILN_ERR_IO, "start with '{'"},
      {"{\"a\":[1]}", 0, KILN_ERR_IO, "not an object"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, KILN_ERR_IO, "needs dtype, shape and data_offsets"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1}}", 8, KILN_ERR_IO, "keys besides"},
      {"{\"a\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, KILN_ERR_IO, "unknown dtype \"F33\""},
      {"{\"a\":{\"dtype\":\"f32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, KILN_ERR_IO, "unknown dtype"},
      {"{\"a\":{\"dtype\":32,\"shape\":[2],\"data_offsets\":[0,8]}}", 8, KILN_ERR_IO, "dtype is not a string"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":2,\"data_offsets\":[0,8]}}", 8, KILN_ERR_IO, "shape is not an array"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, KILN_ERR_IO, "integers >= 0"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}", 8, KILN_ERR_IO, "integers >= 0"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8, KILN_ERR_IO, "begin <= end"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[-8,0]}}", 8, KILN_ERR_IO, "begin <= end"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8, KILN_ERR_IO, "two integers"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,\"8\"]}}", 8, KILN_ERR_IO, "two integers"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, KILN_ERR_IO, "needs 12"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, KILN_ERR_IO, "truncated file"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[100,108]}}", 8, KILN_ERR_IO, "belong to no tensor"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
       "\"b\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
       12, KILN_ERR_IO, "overlaps"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
       "\"b\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
       12, KILN_ERR_IO, "bytes [4, 8) before tensor 'b' belong to no tensor"},
      {"{\"a\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,8]}}", 8, KILN_ERR_IO,
       "overflows"},
      {"{\"a\":{\"dtype\":\"U8\",\"shape\":[99999999999999999999],\"data_offsets\":[0,8]}}", 8, KILN_ERR_IO, "JSON"},
      /* empty, but the strides of the other dims overflow */
      {"{\"a\":{\"dtype\":\"U8\",\"shape\":[1099511627776,0,1099511627776],\"data_offsets\":[0,0]}}", 0,
       KILN_ERR_IO, "overflows"},
      {"{\"a\":{\"dtype\":\"U16\",\"shape\":[4],\"data_offsets\":[0,8]}}", 8, KILN_ERR_DTYPE, "dtype U16"},
      {"{\"a\":{\"dtype\":\"F8_E4M3\",\"shape\":[8],\"data_offsets\":[0,8]}}", 8, KILN_ERR_DTYPE, "F8_E4M3"},
      {"{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,8],\"data_offsets\":[0,8]}}", 8,
       KILN_ERR_UNSUPPORTED, "17 dims"},
  };
  unsigned char data[128] = {0};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    write_st(p, cases[i].json, data, cases[i].data_bytes);
    int n = -1;
    char **names = NULL;
    kiln_tensor **ts = NULL;
    int st = kiln_load_safetensors(p, &n, &names, &ts);
    if (st != (int)cases[i].status || !strstr(kiln_last_error(), cases[i].needle))
      fail_msg("case %zu (%s): got %s: %s", i, cases[i].json, kiln_status_name(kiln_last_status()), kiln_last_error());
    kiln_clear_error();
    assert_int_equal(n, -1);
    assert_null(names);
  }
}

/* Header size against the file: too big, too small, beyond the limit. */
static void bad_header_sizes(void **state) {
  const char *p = path_of("size.safetensors");
  unsigned char b[16] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, '{', '}'};
  spit(p, b, 10);
  assert_null(kiln_load_safetensor(p, "a"));
  expect_error(KILN_ERR_IO, "header size 18446744073709551615 is impossible", NULL);
  b[0] = 3, memset(b + 1, 0, 7);
  spit(p, b, 10);
  assert_null(kiln_load_safetensor(p, "a"));
  expect_error(KILN_ERR_IO, "header size 3", NULL);
  b[0] = 1;
  spit(p, b, 10);
  assert_null(kiln_load_safetensor(p, "a"));
  expect_error(KILN_ERR_IO, "header size 1", NULL);
  b[0] = 0x00, b[3] = 0x10; /* 256 MiB */
  spit(p, b, 10);
  assert_null(kiln_load_safetensor(p, "a"));
  expect_error(KILN_ERR_IO, "limit 100000000", NULL);
  spit(p, b, 5);
  assert_null(kiln_load_safetensor(p, "a"));
  expect_error(KILN_ERR_IO, "too short", NULL);
}

/* __metadata__ is accepted and ignored; another tensor of a dtype Kiln
 * lacks does not stop loading one by name; padding spaces are fine. */
static void metadata_and_foreign_dtypes(void **state) {
  const char *p = path_of("meta.safetensors");
  const char *json = "{\"__metadata__\":{\"format\":\"pt\"},"
                     "\"u\":{\"dtype\":\"U32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                     "\"h\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[4,8]}}     ";
  uint16_t h[2] = {0x3c00, 0xc000}; /* 1, -2 */
  unsigned char data[8] = {1, 2, 3, 4};
  memcpy(data + 4, h, 4);
  write_st(p, json, data, 8);
  kiln_tensor *t = kiln_load_safetensor(p, "h");
  expect_no_error();
  expect_values_tol(t, (double[]){1, -2}, 2, 0);
  kiln_release(t);
  assert_null(kiln_load_safetensor(p, "u"));
  expect_error(KILN_ERR_DTYPE, "tensor 'u' has dtype U32", NULL);
  int n;
  char **names;
  kiln_tensor **ts;
  assert_int_equal(kiln_load_safetensors(p, &n, &names, &ts), KILN_ERR_DTYPE);
  expect_error(KILN_ERR_DTYPE, "U32", NULL);
  /* only the metadata: no tensors */
  write_st(p, "{\"__metadata__\":{}}", NULL, 0);
  assert_int_equal(kiln_load_safetensors(p, &n, &names, &ts), KILN_OK);
  assert_int_equal(n, 0);
  kiln_safetensors_free(n, names, ts);
  /* zero-size tensors may share an offset; BOOL bytes become 0/1 */
  write_st(p,
           "{\"e\":{\"dtype\":\"F64\",\"shape\":[0,3],\"data_offsets\":[0,0]},"
           "\"f\":{\"dtype\":\"I8\",\"shape\":[0],\"data_offsets\":[0,0]},"
           "\"b\":{\"dtype\":\"BOOL\",\"shape\":[3],\"data_offsets\":[0,3]}}",
           (uint8_t[]){0, 7, 1}, 3);
  assert_int_equal(kiln_load_safetensors(p, &n, &names, &ts), KILN_OK);
  assert_int_equal(n, 3);
  assert_string_equal(names[0], "e");
  assert_int_equal(kiln_numel(ts[0]), 0);
  assert_int_equal(kiln_size(ts[0], 1), 3);
  unsigned char bools[3];
  assert_int_equal(kiln_read(ts[2], bools, 3), KILN_OK);
  assert_memory_equal(bools, "\x00\x01\x01", 3);
  kiln_safetensors_free(n, names, ts);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(roundtrip_every_dtype),  cmocka_unit_test(exact_file_bytes),
      cmocka_unit_test(views_and_shapes),       cmocka_unit_test(ownership_in_scope),
      cmocka_unit_test(save_argument_errors),   cmocka_unit_test(load_argument_errors),
      cmocka_unit_test(truncated_every_length), cmocka_unit_test(corrupt_headers),
      cmocka_unit_test(bad_header_sizes),       cmocka_unit_test(metadata_and_foreign_dtypes),
  };
  return cmocka_run_group_tests(tests, make_dir, test_dir_remove);
}
