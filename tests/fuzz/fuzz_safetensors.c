/*
 * fuzz_safetensors.c — libFuzzer harness of the safetensors loader
 * (io/safetensors.c).
 *
 * Each input is the whole contents of a safetensors file, parsed from
 * memory through io_load_safetensors_mem (kiln_load_safetensors without
 * the file system). The loader must never crash, leak or read out of
 * bounds (ASan+UBSan); it fails with KILN_ERR_IO, KILN_ERR_DTYPE or
 * KILN_ERR_UNSUPPORTED and a message naming kiln_load_safetensors, leaving
 * the outputs untouched. When it succeeds, the harness checks the result
 * against its own reading of the header (jansson, as the loader, but only
 * to look entries up): every name is a key of the header, names are
 * distinct, each tensor has the entry's shape and dtype string, is
 * contiguous, and holds exactly the bytes at its data_offsets (BOOL as
 * 0/1). Anything else aborts, which libFuzzer reports as a crash.
 *
 * Seeds: tests/fuzz/corpus/safetensors (tests/fuzz/make_seeds.py).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io_internal.h"
#include "kiln/kiln.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what, const char *name) {
  fprintf(stderr, "fuzz_safetensors: %s%s%s (status %s, last error: %s)\n", what, name ? ": " : "", name ? name : "",
          kiln_status_name(kiln_last_status()), kiln_last_error());
  abort();
}

/* The safetensors dtype string of a Kiln dtype. */
static const char *st_name(kiln_dtype d) {
  static const char *const names[KILN_DTYPE_COUNT] = {"BOOL", "U8",  "I8",   "I16", "I32",
                                                      "I64",  "F16", "BF16", "F32", "F64"};
  return (int)d >= 0 && d < KILN_DTYPE_COUNT ? names[d] : "?";
}

/* Tensor t against its header entry e: dtype, shape, and bytes. */
static void check_tensor(kiln_tensor *t, const char *name, json_t *e, const uint8_t *section, int64_t section_size) {
  const char *dt = json_string_value(json_object_get(e, "dtype"));
  json_t *shape = json_object_get(e, "shape"), *offs = json_object_get(e, "data_offsets");
  if (!dt || strcmp(dt, st_name(kiln_dtype_of(t))) != 0) fail("dtype differs from the header", name);
  if (!json_is_array(shape) || (int)json_array_size(shape) != kiln_dim(t)) fail("dims differ from the header", name);
  for (int d = 0; d < kiln_dim(t); d++)
    if (json_integer_value(json_array_get(shape, (size_t)d)) != kiln_size(t, d)) fail("size differs", name);
  if (!kiln_is_contiguous(t)) fail("a loaded tensor is not contiguous", name);
  int64_t begin = json_integer_value(json_array_get(offs, 0)), end = json_integer_value(json_array_get(offs, 1));
  size_t esize = kiln_dtype_size(kiln_dtype_of(t)), bytes = (size_t)kiln_numel(t) * esize;
  if (begin < 0 || end > section_size || (int64_t)bytes != end - begin) fail("data_offsets do not fit", name);
  uint8_t *got = malloc(bytes ? bytes : 1);
  if (!got) abort();
  if (kiln_read(t, got, bytes) != KILN_OK) fail("kiln_read failed", name);
  const uint8_t *want = section + begin;
  for (size_t i = 0; i < bytes; i++)
    if (got[i] != (kiln_dtype_of(t) == KILN_BOOL ? want[i] != 0 : want[i])) fail("bytes differ from the file", name);
  free(got);
}

/* A successful load against the header the harness parses itself. */
static void check_loaded(const uint8_t *data, size_t size, int n, char **names, kiln_tensor **ts) {
  uint64_t hlen = 0;
  for (int i = 7; i >= 0 && size >= 8; i--) hlen = hlen << 8 | data[i];
  if (size < 8 || hlen > size - 8) fail("loaded a file whose header size does not fit", NULL);
  json_t *root = json_loadb((const char *)data + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, NULL);
  if (!json_is_object(root)) fail("loaded a header that is not a JSON object", NULL);
  size_t keys = json_object_size(root) - (json_object_get(root, "__metadata__") ? 1 : 0);
  if ((size_t)n != keys) fail("tensor count differs from the header's keys", NULL);
  for (int i = 0; i < n; i++) {
    json_t *e = json_object_get(root, names[i]);
    if (!e || strcmp(names[i], "__metadata__") == 0) fail("a name is not a tensor of the header", names[i]);
    for (int j = 0; j < i; j++)
      if (strcmp(names[i], names[j]) == 0) fail("a name is repeated", names[i]);
    check_tensor(ts[i], names[i], e, data + 8 + hlen, (int64_t)(size - 8 - hlen));
  }
  json_decref(root);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  kiln_clear_error();
  int n = -7;
  char **names = (char **)&n; /* must stay untouched on failure */
  kiln_tensor **ts = (kiln_tensor **)&n;
  int st = io_load_safetensors_mem(data, size, "fuzz.safetensors", &n, &names, &ts);
  if (st != KILN_OK) {
    if (st != KILN_ERR_IO && st != KILN_ERR_DTYPE && st != KILN_ERR_UNSUPPORTED) fail("unexpected status", NULL);
    if (n != -7 || names != (char **)&n || ts != (kiln_tensor **)&n) fail("outputs changed by a failed load", NULL);
    if (!strstr(kiln_last_error(), "kiln_load_safetensors")) fail("the message does not name the function", NULL);
    kiln_clear_error();
    return 0;
  }
  if (n < 0 || (n == 0) != (names == NULL) || (n == 0) != (ts == NULL)) fail("bad outputs", NULL);
  check_loaded(data, size, n, names, ts);
  kiln_safetensors_free(n, names, ts);
  kiln_clear_error();
  return 0;
}
