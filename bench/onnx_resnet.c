/*
 * onnx_resnet.c — kiln_bench_onnx: times an ONNX model's inference in
 * Kiln (driven by bench/onnx_resnet.py, which exports torchvision's
 * ResNet-18 and times PyTorch beside it).
 *
 *   kiln_bench_onnx MODEL.onnx BATCH SIZE ITERS
 *
 * Runs the model on a random [BATCH, 3, SIZE, SIZE] input: the first run
 * (recording, compiling and running: its wall time, and the compile time
 * the profiler's records sum), then ITERS timed runs (each records the
 * graph again and forces its output; compiled kernels are cache hits).
 * Prints one line of key=value figures: first_s, compile_s, kernels
 * compiled, steady-state s per run and images/s. Times in s (wall,
 * CLOCK_MONOTONIC).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "kiln/onnx.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* One inference: record, force, release. */
static int infer(kiln_onnx_model *m, kiln_tensor *x) {
  kiln_tensor *y = NULL;
  int rc = kiln_onnx_run(m, &x, 1, &y, 1);
  if (rc == KILN_OK) rc = kiln_realize(y);
  kiln_release(y);
  return rc;
}

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: kiln_bench_onnx MODEL.onnx BATCH SIZE ITERS\n");
    return 2;
  }
  int64_t batch = atoll(argv[2]), size = atoll(argv[3]);
  int iters = atoi(argv[4]);
  kiln_onnx_model *m = kiln_onnx_load(argv[1]);
  if (!m) {
    fprintf(stderr, "kiln_bench_onnx: %s\n", kiln_last_error());
    return 1;
  }
  kiln_manual_seed(0);
  kiln_tensor *x = kiln_randn(KILN_F32, 4, (int64_t[]){batch, 3, size, size});
  kiln_realize(x);
  kiln_profile_begin();
  double t0 = now();
  int rc = infer(m, x);
  double first = now() - t0;
  kiln_profile_end();
  double compile = 0;
  int compiled = 0;
  for (int i = 0; i < kiln_profile_count(); i++) {
    kiln_kernel_record r;
    if (kiln_profile_get(i, &r) == KILN_OK && !r.cache_hit) {
      compile += 1e-9 * (double)r.compile_ns;
      compiled++;
      fprintf(stderr, "compiled: %s (%s, %.1f ms)\n", r.name, r.backend, 1e-6 * (double)r.compile_ns);
    }
  }
  t0 = now();
  for (int i = 0; rc == KILN_OK && i < iters; i++) rc = infer(m, x);
  double per = (now() - t0) / (iters > 0 ? iters : 1);
  if (rc != KILN_OK) fprintf(stderr, "kiln_bench_onnx: %s\n", kiln_last_error());
  else
    printf("batch=%lld first_s=%.3f compile_s=%.3f compiled=%d run_s=%.4f images_per_s=%.1f\n", (long long)batch, first,
           compile, compiled, per, (double)batch / per);
  kiln_release(x);
  kiln_onnx_free(m);
  return rc == KILN_OK ? 0 : 1;
}
