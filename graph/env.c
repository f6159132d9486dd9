/*
 * env.c — integer settings read from the environment.
 *
 * A setting the user made that Kiln ignores is worth one line on stderr
 * (the only thing the library prints unless KILN_DEBUG asks), as for
 * KILN_NUM_THREADS (runtime/pool.c): "kiln: KILN_CACHE_BYTES=2GB is not a
 * non-negative integer; using 2147483648". Callers read each setting
 * once (graph_env_once), so the line is printed once.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "graph.h"

bool graph_env_parse_int(const char *e, int64_t min, int64_t *out) {
  while (*e == ' ' || *e == '\t' || *e == '\n') e++;
  char *end;
  errno = 0;
  long long v = strtoll(e, &end, 10);
  if (end == e || errno) return false;
  while (*end == ' ' || *end == '\t' || *end == '\n') end++;
  if (*end || v < min) return false;
  *out = v;
  return true;
}

static const char *int_kind(int64_t min) {
  return min > 0 ? "a positive integer" : min == 0 ? "a non-negative integer" : "an integer";
}

int64_t graph_env_int(const char *name, int64_t min, int64_t fallback, const char *unit) {
  const char *e = getenv(name);
  int64_t v;
  if (!e) return fallback;
  if (graph_env_parse_int(e, min, &v)) return v;
  fprintf(stderr, "kiln: %s=%s is not %s; using %lld%s%s\n", name, e, int_kind(min), (long long)fallback,
          unit ? " " : "", unit ? unit : "");
  return fallback;
}
