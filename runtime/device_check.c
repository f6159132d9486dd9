/*
 * device_check.c — the CUDA check of CPU kernels: when enabled
 * (KILN_CUDA_CHECK=1, or rt_set_cuda_check for tests), every kernel the
 * CPU runtime compiles is also printed as CUDA C and compiled for the GPU
 * (cuda_check_kernel) for sm_80 (NVRTC → CUBIN) and compute_90 (NVRTC →
 * PTX, assembled by ptxas for sm_90), so the GPU backend's code is checked
 * on machines with a toolkit but no GPU.
 *
 * The check never changes what the CPU computes: a failure is counted,
 * printed to stderr (first line of the message and the kernel name) and
 * kept for rt_cuda_check_stats. Kernels are checked once per distinct
 * kernel IR text (a set of 64-bit hashes). Checks are serialized by one
 * mutex: NVRTC compiles are slow and memory-hungry, and ptxas is a child
 * process. Without NVRTC nothing is compiled and `unavailable` counts the
 * kernels skipped.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_backend.h"
#include "rt_internal.h"

static const char *const check_archs[] = {"sm_80", "compute_90"};
#define N_ARCHS ((int)(sizeof check_archs / sizeof check_archs[0]))

static pthread_mutex_t check_lock = PTHREAD_MUTEX_INITIALIZER;
static int enabled = -1; /* -1: read KILN_CUDA_CHECK on first use */
static rt_cuda_check_stats stats;
static uint64_t *seen; /* open addressing; 0 = empty */
static size_t n_seen, cap_seen;

static void print_summary(void) {
  rt_cuda_check_stats s;
  rt_cuda_check_get(&s);
  fprintf(stderr, "kiln: CUDA check: %lld kernels, %lld compiles (sm_80, compute_90 + ptxas sm_90), %lld failed%s\n",
          (long long)s.kernels, (long long)s.compiles, (long long)s.failures,
          s.unavailable ? " (NVRTC not available: nothing compiled)" : "");
}

static bool check_enabled(void) {
  int e = __atomic_load_n(&enabled, __ATOMIC_ACQUIRE);
  if (e >= 0) return e;
  pthread_mutex_lock(&check_lock);
  e = __atomic_load_n(&enabled, __ATOMIC_RELAXED);
  if (e < 0) {
    const char *v = getenv("KILN_CUDA_CHECK");
    e = v && *v && strcmp(v, "0") != 0;
    if (e) atexit(print_summary);
    __atomic_store_n(&enabled, e, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&check_lock);
  return e;
}

void rt_set_cuda_check(int on) {
  pthread_mutex_lock(&check_lock);
  __atomic_store_n(&enabled, on < 0 ? -1 : on != 0, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&check_lock);
}

void rt_cuda_check_get(rt_cuda_check_stats *out) {
  pthread_mutex_lock(&check_lock);
  *out = stats;
  pthread_mutex_unlock(&check_lock);
}

void rt_cuda_check_reset(void) {
  pthread_mutex_lock(&check_lock);
  memset(&stats, 0, sizeof stats);
  free(seen);
  seen = NULL;
  n_seen = cap_seen = 0;
  pthread_mutex_unlock(&check_lock);
}

/* Under check_lock: true when h was not seen before (and records it);
 * also true when the set cannot grow (the kernel is checked again). */
static bool first_time(uint64_t h) {
  if (h == 0) h = 1;
  if ((n_seen + 1) * 2 > cap_seen) {
    size_t cap = cap_seen ? cap_seen * 2 : 256;
    uint64_t *tab = graph_calloc(cap, sizeof *tab);
    if (!tab) return true;
    for (size_t i = 0; i < cap_seen; i++) {
      if (!seen[i]) continue;
      size_t j = seen[i] & (cap - 1);
      while (tab[j]) j = (j + 1) & (cap - 1);
      tab[j] = seen[i];
    }
    free(seen);
    seen = tab;
    cap_seen = cap;
  }
  size_t j = h & (cap_seen - 1);
  for (; seen[j]; j = (j + 1) & (cap_seen - 1))
    if (seen[j] == h) return false;
  seen[j] = h;
  n_seen++;
  return true;
}

void rt_cuda_check(const kir_kernel *k) {
  if (!check_enabled()) return;
  char *txt = kir_to_string(k);
  if (!txt) return;
  uint64_t h = rt_hash_bytes((const unsigned char *)txt, strlen(txt));
  free(txt);
  pthread_mutex_lock(&check_lock);
  if (!first_time(h)) {
    pthread_mutex_unlock(&check_lock);
    return;
  }
  char err[4096];
  if (!cuda_nvrtc_available(err, sizeof err)) {
    if (stats.unavailable++ == 0) fprintf(stderr, "kiln: KILN_CUDA_CHECK: %s\n", err);
    pthread_mutex_unlock(&check_lock);
    return;
  }
  stats.kernels++;
  for (int a = 0; a < N_ARCHS; a++) {
    int st = cuda_check_kernel(k, check_archs[a], err, sizeof err);
    stats.compiles++;
    if (st == KILN_OK) continue;
    stats.failures++;
    if (!stats.first_error[0]) {
      strncpy(stats.first_error, err, sizeof stats.first_error - 1);
      stats.first_error[sizeof stats.first_error - 1] = 0;
    }
    fprintf(stderr, "kiln: CUDA check of %s for %s failed: %s\n", k->name, check_archs[a], err);
  }
  pthread_mutex_unlock(&check_lock);
}
