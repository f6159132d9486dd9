/*
 * kiln-onnx-run — runs an ONNX model on .npy inputs with Kiln.
 *
 *   kiln-onnx-run MODEL.onnx [-o DIR] [--profile] input.npy ...
 *
 * The inputs are given in the model's input order; each output is written
 * as DIR/<output name>.npy (DIR defaults to the current folder; a '/' in
 * a name becomes '_'). --profile prints Kiln's profile table of the run
 * (kernels, their compile and run times) to stdout. Errors go to stderr
 * and the exit status is 1 (2 for a usage error).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/onnx.h"
#include "kiln/profile.h"

static int usage(void) {
  fprintf(stderr, "usage: kiln-onnx-run MODEL.onnx [-o DIR] [--profile] input.npy ...\n");
  return 2;
}

static int fail(const char *what) {
  fprintf(stderr, "kiln-onnx-run: %s: %s\n", what, kiln_last_error());
  return 1;
}

/* Writes outputs [n] of model m as dir/<name>.npy. */
static int write_outputs(kiln_onnx_model *m, kiln_tensor **outputs, int n, const char *dir) {
  for (int k = 0; k < n; k++) {
    char name[512], path[4096];
    snprintf(name, sizeof name, "%s", kiln_onnx_output_name(m, k));
    for (char *p = name; *p; p++)
      if (*p == '/') *p = '_';
    snprintf(path, sizeof path, "%s/%s.npy", dir, name);
    if (kiln_save_npy(outputs[k], path) != KILN_OK) return fail(path);
    printf("%s\n", path);
  }
  return 0;
}

static int run(kiln_onnx_model *m, char **files, int n_files, const char *dir, bool profile) {
  int ni = kiln_onnx_num_inputs(m), no = kiln_onnx_num_outputs(m);
  if (n_files != ni) {
    fprintf(stderr, "kiln-onnx-run: the model takes %d inputs (", ni);
    for (int k = 0; k < ni; k++) fprintf(stderr, "%s%s", k ? ", " : "", kiln_onnx_input_name(m, k));
    fprintf(stderr, "), got %d .npy files\n", n_files);
    return 1;
  }
  kiln_tensor **in = calloc((size_t)ni + 1, sizeof *in), **out = calloc((size_t)no + 1, sizeof *out);
  int rc = in && out ? 0 : 1;
  for (int k = 0; rc == 0 && k < ni; k++)
    if (!(in[k] = kiln_load_npy(files[k]))) rc = fail(files[k]);
  if (rc == 0 && profile) kiln_profile_begin();
  if (rc == 0 && kiln_onnx_run(m, in, ni, out, no) != KILN_OK) rc = fail("run");
  if (rc == 0 && kiln_realize_many(out, no) != KILN_OK) rc = fail("compute");
  if (profile) {
    kiln_profile_end();
    if (rc == 0) kiln_profile_print(stdout);
  }
  if (rc == 0) rc = write_outputs(m, out, no, dir);
  for (int k = 0; in && k < ni; k++) kiln_release(in[k]);
  for (int k = 0; out && k < no; k++) kiln_release(out[k]);
  free(in);
  free(out);
  return rc;
}

int main(int argc, char **argv) {
  const char *model = NULL, *dir = ".";
  bool profile = false;
  char **files = calloc((size_t)argc + 1, sizeof *files);
  int n_files = 0;
  if (!files) return 1;
  for (int k = 1; k < argc; k++) {
    if (strcmp(argv[k], "-o") == 0 && k + 1 < argc) dir = argv[++k];
    else if (strcmp(argv[k], "--profile") == 0) profile = true;
    else if (strcmp(argv[k], "-h") == 0 || strcmp(argv[k], "--help") == 0 || (argv[k][0] == '-' && argv[k][1])) {
      free(files);
      return usage();
    } else if (!model) model = argv[k];
    else files[n_files++] = argv[k];
  }
  if (!model) {
    free(files);
    return usage();
  }
  kiln_onnx_model *m = kiln_onnx_load(model);
  int rc = m ? run(m, files, n_files, dir, profile) : fail(model);
  kiln_onnx_free(m);
  free(files);
  return rc;
}
