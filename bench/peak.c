/*
 * peak.c — the machine's compute limit for the GEMM rows (G1–G4): the F32
 * multiply-add peak of the vector width Kiln compiles for, measured the
 * way triad.c measures bandwidth: a loop on every pool thread, best of
 * `reps` runs, runs separated by barriers and timed by thread 0.
 *
 * The loop keeps CHAINS independent accumulators (acc = acc·a + b), each
 * a chain of fused multiply-adds: with a latency of 4 cycles and two FMA
 * pipes, 8 chains keep both pipes busy; 12 leave a margin and still fit
 * the 16 registers of AVX2 beside a and b. FLOP per run = 2 × lanes ×
 * CHAINS × iterations per thread × threads.
 *
 * The variant follows the JIT's target (kiln_cpu_target's vector width),
 * not only the CPU, so a KILN_CPU=x86-64-v3 run is held to the AVX2
 * roofline: 512 bits — AVX-512F FMA (16 lanes); 256 — AVX2 FMA (8);
 * 128 — SSE2 (4 lanes, a multiply and an add: SSE2 has no FMA, and
 * neither has code built for x86-64). A width the CPU cannot run falls
 * back to the widest it can. Each variant is compiled with a target
 * attribute and picked at run time (__builtin_cpu_supports), so the
 * bench builds and runs anywhere; off x86-64 there is no roofline.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench.h"

#define CHAINS 12
#define MAX_THREADS 64

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

/* Each kernel runs `iters` iterations of CHAINS multiply-adds and returns
 * a sum of its accumulators (kept, so the loop is not dropped). a < 1 and
 * b small: the accumulators converge, never overflow or go subnormal. */
__attribute__((target("avx512f"))) static float fma512(int64_t iters) {
  __m512 acc[CHAINS], a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-6f);
  for (int c = 0; c < CHAINS; c++) acc[c] = _mm512_set1_ps((float)c);
  for (int64_t i = 0; i < iters; i++)
    for (int c = 0; c < CHAINS; c++) acc[c] = _mm512_fmadd_ps(acc[c], a, b);
  __m512 t = acc[0];
  for (int c = 1; c < CHAINS; c++) t = _mm512_add_ps(t, acc[c]);
  return _mm512_reduce_add_ps(t);
}

__attribute__((target("avx2,fma"))) static float fma256(int64_t iters) {
  __m256 acc[CHAINS], a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-6f);
  for (int c = 0; c < CHAINS; c++) acc[c] = _mm256_set1_ps((float)c);
  for (int64_t i = 0; i < iters; i++)
    for (int c = 0; c < CHAINS; c++) acc[c] = _mm256_fmadd_ps(acc[c], a, b);
  __m256 t = acc[0];
  for (int c = 1; c < CHAINS; c++) t = _mm256_add_ps(t, acc[c]);
  float v[8];
  _mm256_storeu_ps(v, t);
  return v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7];
}

static float muladd128(int64_t iters) {
  __m128 acc[CHAINS], a = _mm_set1_ps(0.999999f), b = _mm_set1_ps(1e-6f);
  for (int c = 0; c < CHAINS; c++) acc[c] = _mm_set1_ps((float)c);
  for (int64_t i = 0; i < iters; i++)
    for (int c = 0; c < CHAINS; c++) acc[c] = _mm_add_ps(_mm_mul_ps(acc[c], a), b);
  __m128 t = acc[0];
  for (int c = 1; c < CHAINS; c++) t = _mm_add_ps(t, acc[c]);
  float v[4];
  _mm_storeu_ps(v, t);
  return v[0] + v[1] + v[2] + v[3];
}

typedef float (*peak_kernel)(int64_t iters);

/* The variant for a target of `bits`-bit vectors that this CPU runs;
 * fills its lanes and name. */
static peak_kernel pick(int bits, int *lanes, const char **name) {
  __builtin_cpu_init();
  if (bits >= 512 && __builtin_cpu_supports("avx512f")) {
    *lanes = 16, *name = "AVX-512F FMA, 16 lanes";
    return fma512;
  }
  if (bits >= 256 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    *lanes = 8, *name = "AVX2 FMA, 8 lanes";
    return fma256;
  }
  *lanes = 4, *name = "SSE2 mul+add, 4 lanes";
  return muladd128;
}
#else
typedef float (*peak_kernel)(int64_t iters);
static peak_kernel pick(int bits, int *lanes, const char **name) {
  (void)bits, (void)lanes;
  *name = "no roofline off x86-64";
  return NULL;
}
#endif

typedef struct peak_job {
  peak_kernel fn;
  int64_t iters;
  int reps;
  pthread_barrier_t *bar;
  int64_t best_ns; /* filled by thread 0 */
  float sink;
} peak_job;

static void *peak_thread(void *arg) {
  peak_job *j = arg;
  int64_t best = INT64_MAX;
  for (int r = 0; r < j->reps; r++) {
    pthread_barrier_wait(j->bar);
    int64_t t0 = bench_now_ns();
    j->sink += j->fn(j->iters);
    pthread_barrier_wait(j->bar);
    int64_t dt = bench_now_ns() - t0;
    if (dt < best) best = dt;
  }
  j->best_ns = best;
  return NULL;
}

volatile float bench_peak_checksum;

double bench_fma_peak(int threads, int vector_bits, int reps, int64_t iters, const char **variant) {
  int lanes = 0;
  const char *name;
  peak_kernel fn = pick(vector_bits, &lanes, &name);
  if (variant) *variant = name;
  if (!fn || threads < 1 || threads > MAX_THREADS || reps < 1 || iters < 1) return -1;
  pthread_barrier_t bar;
  pthread_barrier_init(&bar, NULL, (unsigned)threads);
  peak_job jobs[MAX_THREADS];
  pthread_t tids[MAX_THREADS];
  for (int t = 0; t < threads; t++) jobs[t] = (peak_job){.fn = fn, .iters = iters, .reps = reps, .bar = &bar};
  for (int t = 1; t < threads; t++)
    if (pthread_create(&tids[t], NULL, peak_thread, &jobs[t]) != 0) {
      /* earlier threads would wait at the barrier forever: end here */
      fprintf(stderr, "kiln_bench: roofline: pthread_create failed for thread %d of %d\n", t, threads);
      exit(1);
    }
  peak_thread(&jobs[0]);
  float sink = jobs[0].sink;
  for (int t = 1; t < threads; t++) {
    pthread_join(tids[t], NULL);
    sink += jobs[t].sink;
  }
  pthread_barrier_destroy(&bar);
  bench_peak_checksum = sink;
  double flop = 2.0 * lanes * CHAINS * (double)iters * threads;
  return jobs[0].best_ns > 0 ? flop / (double)jobs[0].best_ns : -1; /* FLOP/ns = GFLOP/s */
}
