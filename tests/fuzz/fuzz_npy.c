/*
 * fuzz_npy.c — libFuzzer harness of the .npy loader (io/npy.c).
 *
 * Each input is the whole contents of a .npy file, parsed from memory
 * through io_load_npy_mem (kiln_load_npy without the file system). The
 * loader must never crash, leak or read out of bounds (ASan+UBSan), must
 * fail with KILN_ERR_IO, KILN_ERR_DTYPE or KILN_ERR_UNSUPPORTED and a
 * message naming kiln_load_npy, and, when it succeeds, the tensor must show
 * the file's own bytes: element [i...] of the view is the element at
 * storage position offset + Σ i_d·stride_d of the data section (data offset
 * from the preamble), byte-swapped or not, BOOL as 0/1, unsigned u2/u4/u8
 * elements as their values in I32/I64. Anything else aborts, which
 * libFuzzer reports as a crash.
 *
 * Seeds: tests/fuzz/corpus/npy (tests/fuzz/make_seeds.py).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io_internal.h"
#include "kiln/kiln.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what) {
  fprintf(stderr, "fuzz_npy: %s (status %s, last error: %s)\n", what, kiln_status_name(kiln_last_status()),
          kiln_last_error());
  abort();
}

/* The byte offset of the data section, as the preamble says; -1 if the
 * preamble is too short (a successful load then is a bug). */
static int64_t data_offset(const uint8_t *d, size_t n) {
  if (n < 10) return -1;
  if (d[6] == 1) return 10 + (int64_t)(d[8] | d[9] << 8);
  if (n < 12) return -1;
  return 12 + (int64_t)((uint32_t)d[8] | (uint32_t)d[9] << 8 | (uint32_t)d[10] << 16 | (uint32_t)d[11] << 24);
}

/* One element (esize bytes at `got`) against the file's bytes: equal as
 * stored, or byte-swapped (a '>' file) — the same choice for the whole
 * file (*swapped: -1 until an element tells, then 0 or 1). */
static bool same_element(const uint8_t *got, const uint8_t *file, int esize, kiln_dtype dt, int *swapped) {
  if (dt == KILN_BOOL) return got[0] == (file[0] != 0);
  bool direct = memcmp(got, file, (size_t)esize) == 0, rev = true;
  for (int b = 0; b < esize; b++) rev = rev && got[b] == file[esize - 1 - b];
  if (direct && rev) return true; /* a palindrome tells nothing */
  int sw = !direct;
  if (*swapped < 0) *swapped = sw; /* the first telling element fixes the byte order */
  return sw == *swapped && (direct || rev);
}

/* The element size of an unsigned descr ('<u2', 'u8', ">u4", ...) in the
 * header, which the loader widens (u2 -> I32, u4/u8 -> I64); 0 if none.
 * The descr is the header's only string, so the first match is it. */
static int unsigned_size(const uint8_t *d, size_t n, int64_t off) {
  size_t end = off > 0 && (size_t)off < n ? (size_t)off : n;
  for (size_t i = 1; i + 2 < end; i++) {
    size_t q = d[i - 1] == '<' || d[i - 1] == '>' || d[i - 1] == '|' || d[i - 1] == '=' ? i - 2 : i - 1;
    bool quoted = q < i && (d[q] == '\'' || d[q] == '"') && d[i + 2] == d[q];
    if (quoted && d[i] == 'u' && (d[i + 1] == '2' || d[i + 1] == '4' || d[i + 1] == '8')) return d[i + 1] - '0';
  }
  return 0;
}

/* A widened unsigned element (got: I32/I64 of gsize bytes) against the
 * file's usize bytes read as a little- or big-endian unsigned integer, with
 * same_element's one byte order per file. */
static bool same_unsigned(const uint8_t *got, int gsize, const uint8_t *file, int usize, int *swapped) {
  uint64_t le = 0, be = 0;
  for (int b = 0; b < usize; b++) le |= (uint64_t)file[b] << (8 * b), be = be << 8 | file[b];
  int64_t g;
  if (gsize == 4) {
    int32_t g32;
    memcpy(&g32, got, 4);
    g = g32;
  } else {
    memcpy(&g, got, 8);
  }
  if (g < 0) return false;
  bool direct = (uint64_t)g == le, rev = (uint64_t)g == be;
  if (direct && rev) return true;
  int sw = !direct;
  if (*swapped < 0) *swapped = sw;
  return sw == *swapped && (direct || rev);
}

/* The view's elements, read row-major, against the data section. */
static void check_values(kiln_tensor *t, const uint8_t *data, size_t size) {
  int64_t off = data_offset(data, size), numel = kiln_numel(t);
  kiln_dtype dt = kiln_dtype_of(t);
  int esize = (int)kiln_dtype_size(dt), nd = kiln_dim(t);
  int usize = unsigned_size(data, size, off), fsize = usize ? usize : esize; /* the file's element size */
  kiln_storage *s = kiln_storage_of(t);
  int64_t snumel = kiln_storage_numel(s);
  kiln_storage_release(s);
  if (off < 0 || numel < 0 || snumel < 0) fail("loaded a file without a full preamble");
  if (usize && dt != (usize == 2 ? KILN_I32 : KILN_I64)) fail("an unsigned file loaded into the wrong dtype");
  if (off + snumel * fsize > (int64_t)size) fail("the storage claims more bytes than the file holds");
  uint8_t *got = malloc((size_t)(numel > 0 ? numel : 1) * (size_t)esize);
  if (!got) abort();
  if (kiln_read(t, got, (size_t)(numel > 0 ? numel : 1) * (size_t)esize) != KILN_OK) fail("kiln_read failed");
  const int64_t *sz = kiln_sizes(t), *st = kiln_strides(t);
  int64_t idx[KILN_MAX_DIMS] = {0};
  int swapped = -1;
  for (int64_t p = 0; p < numel; p++) {
    int64_t pos = kiln_storage_offset(t);
    for (int d = 0; d < nd; d++) pos += idx[d] * st[d];
    if (pos < 0 || pos >= snumel) fail("the view reaches past its storage");
    const uint8_t *file = data + off + pos * fsize;
    bool same = usize ? same_unsigned(got + p * esize, esize, file, usize, &swapped)
                      : same_element(got + p * esize, file, esize, dt, &swapped);
    if (!same) fail("a loaded element differs from the file's bytes");
    for (int d = nd - 1; d >= 0 && ++idx[d] == sz[d]; d--) idx[d] = 0;
  }
  free(got);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  kiln_clear_error();
  kiln_tensor *t = io_load_npy_mem(data, size, "fuzz.npy");
  if (!t) {
    kiln_status s = kiln_last_status();
    if (s != KILN_ERR_IO && s != KILN_ERR_DTYPE && s != KILN_ERR_UNSUPPORTED) fail("unexpected status");
    if (!strstr(kiln_last_error(), "kiln_load_npy")) fail("the message does not name kiln_load_npy");
    kiln_clear_error();
    return 0;
  }
  check_values(t, data, size);
  kiln_release(t);
  kiln_clear_error();
  return 0;
}
