/*
 * attention.c — attention_bench: one scaled dot-product attention,
 * forward and backward, timed in Kiln, with the process's peak memory.
 *
 *   attention_bench [--n N] [--heads H] [--dim D] [--batch B] [--reps R] [--causal]
 *
 * q, k, v F32 [B, H, N, D] (defaults 1, 8, 2048, 64) from Kiln's
 * generator; each repetition records o = kiln_scaled_dot_product_attention
 * (q, k, v, NULL, 0, causal, 0) and loss = sum(o * c) (c fixed random),
 * asks kiln_grad for the gradients of q, k and v and forces them with o.
 * One untimed run first compiles the kernels. Prints the median time of R
 * runs (default 5) and the peak resident set size of the process
 * (getrusage), and that peak less the resident size once the inputs were
 * made (what the attention itself added), in MiB. Run one N per process:
 * the peak only grows. bench/attention_job.sh runs it beside PyTorch
 * (bench/attention.py).
 */
#define _GNU_SOURCE
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "kiln/kiln.h"

static double seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The resident set size now and its peak, in MiB (Linux). */
static double rss_mib(bool peak) {
  if (peak) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss / 1024;
  }
  long pages = 0, resident = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  if (f) {
    if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    fclose(f);
  }
  return (double)resident * 4096 / (1 << 20);
}

/* One forward and backward; KILN_OK or the error's status. */
static int run_once(kiln_tensor *const *qkv, kiln_tensor *c, bool causal) {
  kiln_scope_begin();
  kiln_tensor *o = kiln_scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], NULL, 0, causal, 0);
  kiln_tensor *loss = kiln_sum(kiln_mul(o, c), 0, NULL, false);
  kiln_tensor *g[4] = {o};
  int st = kiln_grad(&loss, NULL, 1, qkv, 3, g + 1);
  if (st == KILN_OK) st = kiln_realize_many(g, 4);
  kiln_scope_end();
  return st;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  int64_t n = 2048, heads = 8, dim = 64, batch = 1;
  int reps = 5;
  bool causal = false;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";
    if (!strcmp(a, "--causal")) causal = true;
    else if (!strcmp(a, "--n")) n = atoll(v), i++;
    else if (!strcmp(a, "--heads")) heads = atoll(v), i++;
    else if (!strcmp(a, "--dim")) dim = atoll(v), i++;
    else if (!strcmp(a, "--batch")) batch = atoll(v), i++;
    else if (!strcmp(a, "--reps")) reps = atoi(v), i++;
    else {
      fprintf(stderr, "usage: attention_bench [--n N] [--heads H] [--dim D] [--batch B] [--reps R] [--causal]\n");
      return 2;
    }
  }
  if (n < 1 || heads < 1 || dim < 1 || batch < 1 || reps < 1 || reps > 100) {
    fprintf(stderr, "attention_bench: sizes and reps (<= 100) must be positive\n");
    return 2;
  }
  kiln_manual_seed(1);
  int64_t sizes[4] = {batch, heads, n, dim};
  kiln_tensor *qkv[3], *c = kiln_randn(KILN_F32, 4, sizes);
  for (int i = 0; i < 3; i++) qkv[i] = kiln_randn(KILN_F32, 4, sizes);
  kiln_tensor *all[4] = {qkv[0], qkv[1], qkv[2], c};
  if (kiln_realize_many(all, 4) != KILN_OK) {
    fprintf(stderr, "attention_bench: %s\n", kiln_last_error());
    return 1;
  }
  double base = rss_mib(false), t0 = seconds();
  int st = run_once(qkv, c, causal); /* compiles */
  double first = seconds() - t0, times[100];
  for (int r = 0; r < reps && st == KILN_OK; r++) {
    t0 = seconds();
    st = run_once(qkv, c, causal);
    times[r] = seconds() - t0;
  }
  if (st != KILN_OK) {
    fprintf(stderr, "attention_bench: %s\n", kiln_last_error());
    return 1;
  }
  qsort(times, (size_t)reps, sizeof *times, cmp);
  double peak = rss_mib(true);
  printf("kiln attention B %lld H %lld N %lld D %lld%s: fwd+bwd %.2f ms (median of %d; first run %.2f s), "
         "peak RSS %.0f MiB, %.0f MiB above the inputs\n",
         (long long)batch, (long long)heads, (long long)n, (long long)dim, causal ? " causal" : "",
         1e3 * times[reps / 2], reps, first, peak, peak - base);
  for (int i = 0; i < 4; i++) kiln_release(all[i]);
  return 0;
}
