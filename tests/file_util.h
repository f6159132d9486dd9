/*
 * file_util.h — for tests that write and read files: a private temporary
 * directory per test program (made and removed by cmocka's group set-up
 * and tear-down), paths in it, and whole-file reads and writes that fail
 * the test on any I/O error. Include after <cmocka.h>.
 */
#ifndef KILN_TEST_FILE_UTIL_H
#define KILN_TEST_FILE_UTIL_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static char test_dir[64];

/* Makes /tmp/kiln_test_<tag>_XXXXXX (tag ≤ 24 characters); 0 on success,
 * for a group set-up: static int make_dir(void **s) { return test_dir_make("npy"); } */
static inline int test_dir_make(const char *tag) {
  snprintf(test_dir, sizeof test_dir, "/tmp/kiln_test_%.24s_XXXXXX", tag);
  return mkdtemp(test_dir) ? 0 : -1;
}

/* cmocka group tear-down: removes the directory and all in it. */
static inline int test_dir_remove(void **state) {
  (void)state;
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", test_dir);
  return system(cmd) == 0 ? 0 : -1;
}

/* test_dir/name, in a static buffer (valid until the next call). */
static inline const char *path_of(const char *name) {
  static char buf[256];
  snprintf(buf, sizeof buf, "%s/%s", test_dir, name);
  return buf;
}

static inline bool exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

/* Whole file into a malloc'ed buffer with one spare byte; *n its size. */
static inline unsigned char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  rewind(f);
  unsigned char *b = malloc((size_t)size + 1);
  assert_non_null(b);
  assert_int_equal(fread(b, 1, (size_t)size, f), (size_t)size);
  fclose(f);
  *n = (size_t)size;
  return b;
}

/* Writes n bytes of data to path (replacing it). */
static inline void spit(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(data, 1, n, f), n);
  fclose(f);
}

#endif
