/*
 * profile_fusion.c — the shortest way to *see* fusion: builds two small
 * graphs, writes them as Graphviz DOT before and after the passes, forces
 * them under the profiler three times (new data each time: the first
 * force compiles, the others hit the caches), then prints the profile
 * table and writes a Chrome trace.
 *
 *   profile_fusion [--out DIR] [--n ELEMENTS] [--rows R] [--cols C]
 *
 * W1: relu(a*b + c) * sigmoid(d) over n elements — five ops, one kernel.
 * Softmax over the rows of x [R, C], max-subtracted — one kernel that
 * reads each row once.
 * Files written in DIR (default "profile_fusion_out", created when
 * missing; printed as they are written): profile_fusion_before.dot,
 * profile_fusion_after.dot (render with `dot -Tsvg FILE -o FILE.svg`) and
 * profile_fusion_trace.json (open in Perfetto).
 */
#define _POSIX_C_SOURCE 200809L /* mkdir */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kiln/kiln.h"

typedef struct options {
  const char *out;
  int64_t n, rows, cols;
} options;

static int parse(int argc, char **argv, options *o) {
  *o = (options){.out = "profile_fusion_out", .n = 1 << 22, .rows = 1024, .cols = 1024};
  for (int i = 1; i < argc; i++) {
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v) goto usage;
    if (strcmp(argv[i], "--out") == 0) o->out = v;
    else if (strcmp(argv[i], "--n") == 0) o->n = atoll(v);
    else if (strcmp(argv[i], "--rows") == 0) o->rows = atoll(v);
    else if (strcmp(argv[i], "--cols") == 0) o->cols = atoll(v);
    else goto usage;
    i++;
  }
  if (o->n > 0 && o->rows > 0 && o->cols > 0) {
    if (mkdir(o->out, 0777) == 0 || errno == EEXIST) return 0;
    fprintf(stderr, "profile_fusion: cannot create %s: %s\n", o->out, strerror(errno));
    return 1;
  }
usage:
  fprintf(stderr, "usage: profile_fusion [--out DIR] [--n ELEMENTS] [--rows R] [--cols C]\n");
  return 2;
}

/* W1 = relu(a*b + c) * sigmoid(d), a..d uniform in [-1, 1) [n]. */
static kiln_tensor *build_w1(int64_t n) {
  kiln_tensor *in[4];
  for (int i = 0; i < 4; i++) in[i] = kiln_sub_scalar(kiln_mul_scalar(kiln_rand(KILN_F32, 1, &n), 2), 1);
  kiln_realize_many(in, 4); /* inputs are data, not part of the fused graph */
  return kiln_mul(kiln_relu(kiln_add(kiln_mul(in[0], in[1]), in[2])), kiln_sigmoid(in[3]));
}

/* Softmax over the last dim of x [rows, cols]: exp(x - max) / sum. */
static kiln_tensor *build_softmax(int64_t rows, int64_t cols) {
  int64_t sizes[2] = {rows, cols};
  kiln_tensor *x = kiln_randn(KILN_F32, 2, sizes);
  kiln_realize(x);
  int last = 1;
  kiln_tensor *e = kiln_exp(kiln_sub(x, kiln_amax(x, 1, &last, true)));
  return kiln_div(e, kiln_sum(e, 1, &last, true));
}

static int write_dots(const options *o, kiln_tensor *const *ts, int n) {
  char path[4096];
  snprintf(path, sizeof path, "%s/profile_fusion_before.dot", o->out);
  if (kiln_graph_write_dot(ts, n, path, KILN_DOT_BEFORE_PASSES) != KILN_OK) return -1;
  printf("graph before the passes: %s\n", path);
  snprintf(path, sizeof path, "%s/profile_fusion_after.dot", o->out);
  if (kiln_graph_write_dot(ts, n, path, KILN_DOT_AFTER_PASSES) != KILN_OK) return -1;
  printf("graph after the passes (clusters are kernels): %s\n", path);
  return 0;
}

/* One round: build both graphs on new data and force them together. */
static int round_trip(const options *o, bool write_graphs) {
  kiln_scope_begin();
  kiln_tensor *ts[2] = {build_w1(o->n), build_softmax(o->rows, o->cols)};
  int st = ts[0] && ts[1] ? KILN_OK : kiln_last_status();
  if (st == KILN_OK && write_graphs) st = write_dots(o, ts, 2);
  if (st == KILN_OK) st = kiln_realize_many(ts, 2);
  kiln_scope_end();
  return st;
}

int main(int argc, char **argv) {
  options o;
  int bad = parse(argc, argv, &o);
  if (bad) return bad;
  kiln_manual_seed(1);
  kiln_profile_begin();
  for (int r = 0; r < 3; r++) {
    if (round_trip(&o, r == 0) != KILN_OK) {
      fprintf(stderr, "profile_fusion: %s\n", kiln_last_error());
      return 1;
    }
  }
  kiln_profile_end();
  printf("\n");
  kiln_profile_print(stdout);
  char path[4096];
  snprintf(path, sizeof path, "%s/profile_fusion_trace.json", o.out);
  if (kiln_profile_write_trace(path) != KILN_OK) {
    fprintf(stderr, "profile_fusion: %s\n", kiln_last_error());
    return 1;
  }
  printf("\ntrace (open in Perfetto): %s\n", path);
  return 0;
}
