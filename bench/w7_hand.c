/*
 * w7_hand.c — hand-written references for W7 and W7r: out[i][j] = a[j][i]
 * + b[j], a [n, n] and out [n, n] row-major F32, b [n], written with
 * AVX-512 intrinsics so the bench can print the machine's bound for the
 * shape beside Kiln's figure (rows W7-hand, W7r-hand).
 *
 * Method (the fastest found on the development machine; bench/README.md):
 * - bands of 16 output rows (16 source columns) are split evenly over
 *   `threads` pthreads; each thread walks its bands in groups of GROUP;
 *   per group: column blocks m outside, the group's bands inside, so the
 *   source is read as 16 (or 32) sequential streams of GROUP·64 bytes;
 * - a tile loads 16 source rows × 16 floats, transposes them in registers
 *   (four shuffle stages) and adds b;
 * - n % 16 == 0: each transposed row is one whole, aligned output line,
 *   stored with a streaming store;
 * - n % 16 != 0: output row i's lines start at column c(i) + 16m, where
 *   c(i) = (-i·n) mod 16; for n ≡ -1 (mod 16), i.e. W7r, c(i) = i mod 16,
 *   which is fixed per row of a band. The tile transposes source rows
 *   [16m, 16m + 32) (two blocks; the second is the next tile's first,
 *   kept per band in a small buffer) and takes a 16-lane window of each
 *   row pair (valignd by the row's constant offset), so every line is
 *   written whole, once, and streams. Columns left out (each row's first
 *   c(i) and last few, the rows of a last partial band) are written by
 *   plain scalar loops. Other ragged n are not handled (returns -1).
 *
 * Units: times in ns. Built with a target attribute and dispatched at run
 * time (__builtin_cpu_supports), so the bench builds and runs anywhere;
 * bench_w7_hand returns -1 where AVX-512F is missing.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "bench.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define W7_HAND_X86 1
#include <immintrin.h>
#else
#define W7_HAND_X86 0
#endif

/* Bands per group; the kept-block buffer is GROUP KiB. 128 (all of a
 * thread's bands at 4095² and 2 threads: the longest source streams) ran
 * best of 1, 4, 8, 16, 32, 64, 128 on the development machine. */
#define GROUP 128
#define HUGE_ALIGN ((size_t)2 << 20)

typedef struct w7_job {
  const float *a, *b;
  float *out;
  int64_t n;
  int64_t band_lo, band_hi; /* this thread's full bands [lo, hi) */
  int reps, id;
  pthread_barrier_t *bar;
  int64_t *times; /* filled by thread 0, one per rep */
} w7_job;

#if W7_HAND_X86
#define AVX512 __attribute__((target("avx512f")))

/* In-place transpose of the 16 × 16 block r[0..15] (row k -> column k). */
AVX512 static inline void tr16(__m512 r[16]) {
  __m512 t[16], u[16];
  for (int k = 0; k < 8; k++) {
    t[2 * k] = _mm512_unpacklo_ps(r[2 * k], r[2 * k + 1]);
    t[2 * k + 1] = _mm512_unpackhi_ps(r[2 * k], r[2 * k + 1]);
  }
  for (int g = 0; g < 4; g++) { /* u[4g + c]: columns c, c+4, c+8, c+12 of rows 4g..4g+3 */
    __m512d t0 = _mm512_castps_pd(t[4 * g]), t1 = _mm512_castps_pd(t[4 * g + 1]);
    __m512d t2 = _mm512_castps_pd(t[4 * g + 2]), t3 = _mm512_castps_pd(t[4 * g + 3]);
    u[4 * g] = _mm512_castpd_ps(_mm512_unpacklo_pd(t0, t2));
    u[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(t0, t2));
    u[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(t1, t3));
    u[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(t1, t3));
  }
  for (int c = 0; c < 4; c++) {
    __m512 v0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88), v1 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xDD);
    __m512 w0 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88), w1 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xDD);
    r[c] = _mm512_shuffle_f32x4(v0, w0, 0x88);
    r[c + 8] = _mm512_shuffle_f32x4(v0, w0, 0xDD);
    r[c + 4] = _mm512_shuffle_f32x4(v1, w1, 0x88);
    r[c + 12] = _mm512_shuffle_f32x4(v1, w1, 0xDD);
  }
}

/* Loads rows [0, rows) of the block at src (row stride n), transposed;
 * rows past `rows` are zero (never read by the windows that take them). */
AVX512 static inline void load_tr(__m512 r[16], const float *src, int64_t n, int rows) {
  for (int k = 0; k < 16; k++) r[k] = k < rows ? _mm512_loadu_ps(src + k * n) : _mm512_setzero_ps();
  tr16(r);
}

/* n % 16 == 0: tile (band p, column block m), one whole line per row. */
AVX512 static void tile_aligned(const w7_job *j, int64_t p, int64_t m) {
  __m512 r[16];
  load_tr(r, j->a + 16 * m * j->n + 16 * p, j->n, 16);
  __m512 bv = _mm512_loadu_ps(j->b + 16 * m);
  for (int k = 0; k < 16; k++) _mm512_stream_ps(j->out + (16 * p + k) * j->n + 16 * m, _mm512_add_ps(r[k], bv));
}

/* Row k of a skewed tile: the window of lo:hi starting at lane k. */
#define SKEW_ROW(k)                                                                                       \
  do {                                                                                                    \
    __m512i w = _mm512_alignr_epi32(_mm512_castps_si512(hi[k]), _mm512_castps_si512(lo[k]), (k) & 15);     \
    __m512 v = _mm512_add_ps(_mm512_castsi512_ps(w), _mm512_loadu_ps(j->b + 16 * m + (k)));              \
    _mm512_stream_ps(j->out + (16 * p + (k)) * j->n + 16 * m + (k), v);                                     \
  } while (0)

/* n ≡ -1 (mod 16): skewed tile (band p, column block m); `keep` holds the
 * band's transposed source rows [16m, 16m + 16) and gets [16m + 16, 16m + 32). */
AVX512 static void tile_skewed(const w7_job *j, int64_t p, int64_t m, float *keep) {
  __m512 lo[16], hi[16];
  for (int k = 0; k < 16; k++) lo[k] = _mm512_load_ps(keep + 16 * k);
  int64_t rows = j->n - 16 * (m + 1);
  load_tr(hi, j->a + 16 * (m + 1) * j->n + 16 * p, j->n, rows < 16 ? (int)rows : 16);
  for (int k = 0; k < 16; k++) _mm512_store_ps(keep + 16 * k, hi[k]);
  SKEW_ROW(0); SKEW_ROW(1); SKEW_ROW(2); SKEW_ROW(3); SKEW_ROW(4); SKEW_ROW(5); SKEW_ROW(6); SKEW_ROW(7);
  SKEW_ROW(8); SKEW_ROW(9); SKEW_ROW(10); SKEW_ROW(11); SKEW_ROW(12); SKEW_ROW(13); SKEW_ROW(14); SKEW_ROW(15);
}

/* One group of bands [p0, p1): column blocks outside, bands inside. */
AVX512 static void group_run(const w7_job *j, int64_t p0, int64_t p1) {
  int64_t n = j->n;
  if (n % 16 == 0) {
    for (int64_t m = 0; m < n / 16; m++)
      for (int64_t p = p0; p < p1; p++) tile_aligned(j, p, m);
    return;
  }
  static _Thread_local float keep[GROUP][256] __attribute__((aligned(64)));
  for (int64_t p = p0; p < p1; p++) {
    __m512 r[16];
    load_tr(r, j->a + 16 * p, n, 16);
    for (int k = 0; k < 16; k++) _mm512_store_ps(keep[p - p0] + 16 * k, r[k]);
  }
  /* line m of row k covers columns [16m + k, 16m + k + 16) < n for all k */
  for (int64_t m = 0; 16 * m + 31 <= n; m++)
    for (int64_t p = p0; p < p1; p++) tile_skewed(j, p, m, keep[p - p0]);
}

/* Elements the tiles leave out of the thread's bands: each row's first
 * (i mod 16) columns and those past its last whole line (plain stores). */
static void edges(const w7_job *j) {
  int64_t n = j->n, last = 16 * ((n - 31) / 16 + 1); /* first column no line of row k = 0 covers */
  if (n % 16 == 0) return;
  for (int64_t i = 16 * j->band_lo; i < 16 * j->band_hi; i++) {
    int64_t k = i % 16;
    for (int64_t c = 0; c < k; c++) j->out[i * n + c] = j->a[c * n + i] + j->b[c];
    for (int64_t c = last + k; c < n; c++) j->out[i * n + c] = j->a[c * n + i] + j->b[c];
  }
}

AVX512 static void run_bands(const w7_job *j) {
  for (int64_t p = j->band_lo; p < j->band_hi; p += GROUP)
    group_run(j, p, p + GROUP < j->band_hi ? p + GROUP : j->band_hi);
  edges(j);
  if (j->id == 0)
    for (int64_t c = 0; c < j->n; c++) /* rows of the last partial band */
      for (int64_t i = 16 * (j->n / 16); i < j->n; i++) j->out[i * j->n + c] = j->a[c * j->n + i] + j->b[c];
  _mm_sfence();
}

static void *w7_thread(void *arg) {
  w7_job *j = arg;
  memset(j->out + 16 * j->band_lo * j->n, 0, (size_t)(16 * (j->band_hi - j->band_lo) * j->n) * sizeof(float));
  for (int r = 0; r < j->reps; r++) {
    pthread_barrier_wait(j->bar);
    int64_t t0 = bench_now_ns();
    run_bands(j);
    pthread_barrier_wait(j->bar);
    if (j->id == 0) j->times[r] = bench_now_ns() - t0;
  }
  return NULL;
}

static float *huge_alloc(size_t bytes) {
  float *p = NULL;
  if (posix_memalign((void **)&p, HUGE_ALIGN, bytes) != 0) return NULL;
#ifdef MADV_HUGEPAGE
  madvise(p, bytes, MADV_HUGEPAGE); /* advice only */
#endif
  return p;
}

/* Worst error of sampled outputs (exact: one F32 add). */
static double check_out(const float *a, const float *b, const float *out, int64_t n) {
  double worst = 0;
  for (int64_t s = 0; s < 4099; s++) {
    int64_t i = (s * 7919) % n, c = (s * 104729 + s / 3) % n;
    float want = a[c * n + i] + b[c];
    double e = out[i * n + c] == want ? 0 : 1e9;
    if (e > worst) worst = e;
  }
  for (int64_t i = 0; i < n; i += n - 1) /* corners and first/last rows */
    for (int64_t c = 0; c < n; c++)
      if (out[i * n + c] != a[c * n + i] + b[c]) worst = 1e9;
  return worst;
}

static int cmp64(const void *x, const void *y) {
  int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
  return (a > b) - (a < b);
}

int bench_w7_hand(int64_t n, int threads, int reps, int64_t *med_ns, int64_t *min_ns, double *err) {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512f") || (n % 16 != 0 && n % 16 != 15) || n < 32 || threads < 1 || reps < 1)
    return -1;
  size_t bytes = (size_t)(n * n) * sizeof(float);
  float *a = huge_alloc(bytes), *out = huge_alloc(bytes), *b = malloc((size_t)n * sizeof(float));
  int64_t *times = malloc((size_t)reps * sizeof *times);
  w7_job *jobs = malloc((size_t)threads * sizeof *jobs);
  pthread_t *tid = malloc((size_t)threads * sizeof *tid);
  int rc = -2;
  if (!a || !out || !b || !times || !jobs || !tid) goto done;
  for (int64_t e = 0; e < n * n; e++) a[e] = (float)((e * 2654435761u) % 1000) * 0.001f;
  for (int64_t e = 0; e < n; e++) b[e] = (float)e * 0.5f;
  pthread_barrier_t bar;
  pthread_barrier_init(&bar, NULL, (unsigned)threads);
  int64_t bands = n / 16;
  for (int t = 0; t < threads; t++)
    jobs[t] = (w7_job){a, b, out, n, bands * t / threads, bands * (t + 1) / threads, reps, t, &bar, times};
  for (int t = 1; t < threads; t++) pthread_create(&tid[t], NULL, w7_thread, &jobs[t]);
  w7_thread(&jobs[0]);
  for (int t = 1; t < threads; t++) pthread_join(tid[t], NULL);
  pthread_barrier_destroy(&bar);
  *err = check_out(a, b, out, n);
  qsort(times, (size_t)reps, sizeof *times, cmp64);
  *min_ns = times[0];
  *med_ns = reps % 2 ? times[reps / 2] : (times[reps / 2 - 1] + times[reps / 2]) / 2;
  rc = 0;
done:
  free(a);
  free(out);
  free(b);
  free(times);
  free(jobs);
  free(tid);
  return rc;
}
#else
int bench_w7_hand(int64_t n, int threads, int reps, int64_t *med_ns, int64_t *min_ns, double *err) {
  (void)n, (void)threads, (void)reps, (void)med_ns, (void)min_ns, (void)err;
  return -1;
}
#endif
