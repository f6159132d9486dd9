/*
 * onnx_node_suite.c — runs the ONNX backend test suite that Debian's
 * libonnx-testdata ships (data/node, data/pytorch-converted,
 * data/pytorch-operator: a model.onnx and test_data_set_N/{input,output}_K.pb
 * per test) through kiln_onnx_load and kiln_onnx_run, and compares every
 * output with the expected one within ONNX's tolerances (its backend
 * runner's np.testing.assert_allclose: rtol 1e-3, atol 1e-7; NaN equals
 * NaN; dtypes and shapes must match exactly).
 *
 * A test counts as "not supported" when loading or running it fails with
 * KILN_ERR_UNSUPPORTED (an operator, attribute, opset or dtype Kiln
 * lacks) or its data files hold something other than tensors (sequences,
 * optionals); any other error or mismatch is a failure. Prints one line
 * per failure, the counts, and the most frequent reasons tests are not
 * supported; exits 1 on any failure, 77 (skip) when the data is absent.
 *
 * Usage: onnx_node_suite DATA_DIR [SUBDIR ...] [-k SUBSTRING] [-v]
 */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "onnx_internal.h"

typedef struct counts {
  int passed, failed, unsupported;
} counts;

typedef struct reason {
  char text[160];
  int n;
} reason;

static reason reasons[512];
static int n_reasons;
static bool verbose;

/* Tallies why a test is not supported: the error message from the first
 * "operator" / "not supported" word on, so tests group by operator. */
static void note_reason(const char *msg) {
  char key[160];
  const char *p = strstr(msg, "operator ");
  snprintf(key, sizeof key, "%s", p ? p : msg);
  char *q = strstr(key, " is not supported");
  if (q) *q = '\0';
  for (int k = 0; k < n_reasons; k++)
    if (strcmp(reasons[k].text, key) == 0) {
      reasons[k].n++;
      return;
    }
  if (n_reasons < 512) {
    snprintf(reasons[n_reasons].text, sizeof reasons[n_reasons].text, "%s", key);
    reasons[n_reasons++].n = 1;
  }
}

static uint8_t *read_file(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
  if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
    free(buf);
    buf = NULL;
  }
  fclose(f);
  *size = (size_t)n;
  return buf;
}

/* A .pb TensorProto file as a tensor; NULL when absent or not a tensor. */
static kiln_tensor *read_pb(const char *path) {
  size_t size;
  uint8_t *buf = read_file(path, &size);
  if (!buf) return NULL;
  Onnx__TensorProto *t = onnx__tensor_proto__unpack(NULL, size, buf);
  free(buf);
  if (!t) return NULL;
  kiln_tensor *r = t->has_data_type ? onnx_tensor_from_proto(t, NULL, "read_pb") : NULL;
  onnx__tensor_proto__free_unpacked(t, NULL);
  return r;
}

static bool exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

/* got matches want: dtype, sizes, values within rtol 1e-3, atol 1e-7. */
static bool same(kiln_tensor *got, kiln_tensor *want, char *why, size_t len) {
  if (kiln_dtype_of(got) != kiln_dtype_of(want)) {
    snprintf(why, len, "dtype %s, expected %s", kiln_dtype_name(kiln_dtype_of(got)), kiln_dtype_name(kiln_dtype_of(want)));
    return false;
  }
  if (kiln_dim(got) != kiln_dim(want) || !kiln_is_same_size(got, want)) {
    snprintf(why, len, "rank %d numel %lld, expected rank %d numel %lld", kiln_dim(got), (long long)kiln_numel(got),
             kiln_dim(want), (long long)kiln_numel(want));
    return false;
  }
  int64_t n = kiln_numel(want);
  double *a = malloc(((size_t)n + 1) * sizeof *a), *b = malloc(((size_t)n + 1) * sizeof *b);
  kiln_tensor *ga = kiln_to_dtype(got, KILN_F64), *wb = kiln_to_dtype(want, KILN_F64);
  bool ok = kiln_read(ga, a, (size_t)n * sizeof *a) == KILN_OK && kiln_read(wb, b, (size_t)n * sizeof *b) == KILN_OK;
  if (!ok) snprintf(why, len, "read failed: %s", kiln_last_error());
  for (int64_t i = 0; ok && i < n; i++) {
    if (isnan(a[i]) && isnan(b[i])) continue;
    if (a[i] == b[i]) continue;
    if (!(fabs(a[i] - b[i]) <= 1e-7 + 1e-3 * fabs(b[i]))) {
      snprintf(why, len, "element %lld: %.9g, expected %.9g", (long long)i, a[i], b[i]);
      ok = false;
    }
  }
  kiln_release(ga);
  kiln_release(wb);
  free(a);
  free(b);
  return ok;
}

typedef enum { T_PASS, T_FAIL, T_UNSUPPORTED } outcome;

static outcome unsupported_or_fail(const char *name, const char *stage) {
  const char *msg = kiln_last_error();
  if (kiln_last_status() == KILN_ERR_UNSUPPORTED) {
    note_reason(msg);
    if (verbose) printf("unsupported %s: %s\n", name, msg);
    kiln_clear_error();
    return T_UNSUPPORTED;
  }
  printf("FAIL %s (%s): %s\n", name, stage, msg);
  fflush(stdout);
  kiln_clear_error();
  return T_FAIL;
}

/* One data set of a loaded model. */
static outcome run_set(kiln_onnx_model *m, const char *dir, const char *name) {
  char path[4096], why[256];
  int ni = kiln_onnx_num_inputs(m), no = kiln_onnx_num_outputs(m);
  kiln_tensor *in[64] = {0}, *out[64] = {0}, *want[64] = {0};
  outcome r = T_PASS;
  if (ni > 64 || no > 64) return T_UNSUPPORTED;
  for (int k = 0; r == T_PASS && k < ni; k++) {
    snprintf(path, sizeof path, "%s/input_%d.pb", dir, k);
    in[k] = read_pb(path);
    if (!in[k]) {
      note_reason(exists(path) ? "data that is not a tensor (sequence, optional, ...)" : "an input file is missing");
      kiln_clear_error();
      r = T_UNSUPPORTED;
    }
  }
  for (int k = 0; r == T_PASS && k < no; k++) {
    snprintf(path, sizeof path, "%s/output_%d.pb", dir, k);
    want[k] = read_pb(path);
    if (!want[k]) {
      note_reason("expected output that is not a tensor (sequence, optional, ...)");
      kiln_clear_error();
      r = T_UNSUPPORTED;
    }
  }
  if (r == T_PASS && kiln_onnx_run(m, in, ni, out, no) != KILN_OK) r = unsupported_or_fail(name, "run");
  for (int k = 0; r == T_PASS && k < no; k++) {
    if (!same(out[k], want[k], why, sizeof why)) {
      if (kiln_last_status() == KILN_ERR_UNSUPPORTED) {
        r = unsupported_or_fail(name, "force");
      } else {
        printf("FAIL %s: output %d ('%s'): %s\n", name, k, kiln_onnx_output_name(m, k), why);
        fflush(stdout);
        kiln_clear_error();
        r = T_FAIL;
      }
    }
  }
  for (int k = 0; k < 64; k++) {
    kiln_release(in[k]);
    kiln_release(out[k]);
    kiln_release(want[k]);
  }
  return r;
}

static outcome run_test(const char *dir, const char *name) {
  char path[4096];
  snprintf(path, sizeof path, "%s/model.onnx", dir);
  kiln_onnx_model *m = kiln_onnx_load(path);
  if (!m) return unsupported_or_fail(name, "load");
  outcome r = T_PASS;
  for (int s = 0; r == T_PASS; s++) {
    snprintf(path, sizeof path, "%s/test_data_set_%d", dir, s);
    if (!exists(path)) break;
    r = run_set(m, path, name);
  }
  kiln_onnx_free(m);
  return r;
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }
static int by_count(const void *a, const void *b) { return ((const reason *)b)->n - ((const reason *)a)->n; }

static void run_suite(const char *root, const char *sub, const char *filter, counts *c) {
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/%s", root, sub);
  DIR *d = opendir(dir);
  if (!d) return;
  char *names[4096];
  int n = 0;
  for (struct dirent *e; (e = readdir(d)) && n < 4096;)
    if (e->d_name[0] != '.' && (!filter || strstr(e->d_name, filter))) names[n++] = strdup(e->d_name);
  closedir(d);
  qsort(names, (size_t)n, sizeof *names, by_name);
  for (int k = 0; k < n; k++) {
    char path[4096], label[512];
    snprintf(path, sizeof path, "%s/%s", dir, names[k]);
    snprintf(label, sizeof label, "%s/%s", sub, names[k]);
    switch (run_test(path, label)) {
    case T_PASS:
      c->passed++;
      if (verbose) printf("pass %s\n", label);
      fflush(stdout);
      break;
    case T_FAIL: c->failed++; break;
    case T_UNSUPPORTED: c->unsupported++; break;
    }
    free(names[k]);
  }
}

int main(int argc, char **argv) {
  const char *root = NULL, *filter = NULL, *subs[8];
  int n_subs = 0;
  for (int k = 1; k < argc; k++) {
    if (strcmp(argv[k], "-v") == 0) verbose = true;
    else if (strcmp(argv[k], "-k") == 0 && k + 1 < argc) filter = argv[++k];
    else if (!root) root = argv[k];
    else if (n_subs < 8) subs[n_subs++] = argv[k];
  }
  if (!root || !exists(root)) {
    printf("SKIP: no ONNX test data at %s (Debian: libonnx-testdata)\n", root ? root : "(none given)");
    return 77;
  }
  if (n_subs == 0) {
    subs[n_subs++] = "node";
    subs[n_subs++] = "pytorch-converted";
    subs[n_subs++] = "pytorch-operator";
  }
  counts total = {0};
  for (int s = 0; s < n_subs; s++) {
    counts c = {0};
    run_suite(root, subs[s], filter, &c);
    printf("%s: %d passed, %d failed, %d not supported\n", subs[s], c.passed, c.failed, c.unsupported);
    total.passed += c.passed;
    total.failed += c.failed;
    total.unsupported += c.unsupported;
  }
  qsort(reasons, (size_t)n_reasons, sizeof *reasons, by_count);
  printf("not supported, most frequent reasons:\n");
  for (int k = 0; k < n_reasons && k < (verbose ? n_reasons : 25); k++) printf("  %4d  %s\n", reasons[k].n, reasons[k].text);
  printf("ONNX backend tests: %d passed, %d failed, %d not supported\n", total.passed, total.failed, total.unsupported);
  return total.failed ? 1 : 0;
}
