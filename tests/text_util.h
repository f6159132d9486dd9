/*
 * text_util.h — counting strings in text a test captured (LLVM IR, a
 * printed profile table, messages). Header only and no Kiln symbols, so
 * test_kir_llvm, which links only the LLVM backend, includes it too.
 */
#ifndef KILN_TEST_TEXT_UTIL_H
#define KILN_TEST_TEXT_UTIL_H

#include <string.h>

/* Occurrences of needle in text, overlapping ones included. */
static inline int count_text(const char *text, const char *needle) {
  int n = 0;
  for (const char *p = strstr(text, needle); p; p = strstr(p + 1, needle)) n++;
  return n;
}

#endif
