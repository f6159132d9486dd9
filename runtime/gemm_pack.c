/*
 * gemm_pack.c — the generated GEMM's operands read through a reshape
 * copy (implicit GEMM): a MATMUL operand whose node is a pending CAST of
 * the same dtype (kiln_reshape's lazy copy: a convolution's im2col
 * columns, a permuted tensor merged) is packed straight from the copy's
 * input, through graph_view_split's sub-dims, so the copy is never
 * written. docs/internals.md, "Implicit GEMM".
 *
 * Who decides: the fuser leaves such a copy unmaterialized (passes/
 * fuse.c, rule 5) and materializes its input instead; at run time
 * (rt_run_extern) the MATMUL reads through it when the generated GEMM
 * runs the product and the copy's input has a host buffer
 * (rt_gemm_reads_through), else the copy is realized first as before
 * (OpenBLAS, KILN_GEMM=blas, the auto rule's small products, the cuda
 * backends). The values are the same either way: the packing copies
 * elements, it computes nothing.
 *
 * Packing one panel of `ld` lines (A's rows or B's columns) × kc: the
 * lines' offsets come from an odometer over their sub-dims (no division
 * per element), grouped into runs contiguous in the input (a stride-1
 * convolution's output row); k walks its own sub-dims. When k's innermost
 * sub-dim is contiguous and long (B = columnsᵀ in the weight gradient,
 * a permuted gradient as A) the panel is transposed from the lines
 * (16 at a time on an AVX-512 target in F32, else in SSE2 blocks:
 * transpose_lines); lines that are runs of one element each are loaded one
 * by one (copy_lines); otherwise the k rows' offsets are computed once
 * per call and each row's runs copied by the widest moves the host and
 * the JIT's target allow (runs_copier).
 */
#include <stdatomic.h>
#include <string.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#include <xmmintrin.h>
#endif
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define PACK_X86 1
#endif

#include "llvm_backend.h"
#include "rt_internal.h"

const void *rt_gemm_copy_source(const graph_node *n, int i, graph_split_view *s) {
  if (n->op != GRAPH_OP_MATMUL || n->device != KILN_CPU || (n->dtype != KILN_F32 && n->dtype != KILN_F64))
    return NULL;
  const graph_node *c = n->inputs[i].node;
  if (c->op != GRAPH_OP_CAST || c->device != KILN_CPU) return NULL;
  const graph_node *src = c->inputs[0].node;
  const graph_buffer *b = src->buffer;
  if (src->dtype != c->dtype || !b || b->device != KILN_CPU) return NULL;
  graph_split_view tmp;
  return graph_view_split(&n->inputs[i].view, &c->inputs[0].view, s ? s : &tmp) ? b->data : NULL;
}

bool rt_gemm_pending_copy(const graph_node *n) {
  for (int i = 0; i < n->n_inputs; i++)
    if (!n->inputs[i].node->buffer && rt_gemm_copy_source(n, i, NULL)) return true;
  return false;
}

bool rt_gemm_reads_through(const graph_node *n, int i) {
  return !n->inputs[i].node->buffer && rt_gemm_copy_source(n, i, NULL) && rt_gemm_selected(n);
}

/* The odometer over the sub-dims of one outer dim, from index i0. */
typedef struct sub_walk {
  int first, last; /* sub-dims [first, last) */
  int64_t idx[KILN_MAX_DIMS];
  int64_t off;
} sub_walk;

static void walk_start(sub_walk *w, const graph_split_view *s, int d, int64_t i0) {
  w->first = s->first[d], w->last = s->first[d + 1];
  w->off = graph_split_offset(s, d, i0);
  for (int t = w->last - 1; t >= w->first; t--) w->idx[t] = i0 % s->sizes[t], i0 /= s->sizes[t];
}

static inline void walk_next(sub_walk *w, const graph_split_view *s) {
  for (int t = w->last - 1; t >= w->first; t--) {
    w->off += s->strides[t];
    if (++w->idx[t] < s->sizes[t]) return;
    w->off -= s->sizes[t] * s->strides[t];
    w->idx[t] = 0;
  }
}

#define PANEL_MAX (LLVM_GEMM_MAX_NR > LLVM_GEMM_MAX_MR ? LLVM_GEMM_MAX_NR : LLVM_GEMM_MAX_MR) /* lines */

/* One panel being packed: its lines' offsets in the input, and the
 * same as runs of consecutive lines contiguous in the input. */
typedef struct panel {
  int64_t lines, nruns;
  int64_t step; /* every line its own run (a strided convolution's windows): each `step` elements after the
                  one before (> 1), or 0 */
  int64_t loff[PANEL_MAX];
  int64_t run_at[PANEL_MAX]; /* first line */
} panel;

#if defined(PACK_X86)
/* The widest vectors the x86 packs use, in bits: 512 (AVX-512F), 256
 * (AVX2) or 128 (SSE2), as the host has them and the JIT's target
 * (KILN_CPU) runs them; read once. */
static int pack_bits(void) {
  static _Atomic int bits;
  int b = atomic_load_explicit(&bits, memory_order_relaxed);
  if (b) return b;
  int target = llvm_target_vector_bits();
  __builtin_cpu_init();
  b = target >= 512 && __builtin_cpu_supports("avx512f") ? 512
      : target >= 256 && __builtin_cpu_supports("avx2") ? 256
                                                         : 128;
  atomic_store_explicit(&bits, b, memory_order_relaxed);
  return b;
}
#endif

/* k steps along a run of contiguous input elements: dst[k·ld + l] =
 * src_l[k] for the panel's lines l from l0 and k < seg — a transpose.
 * F32 goes through SSE2 in 4 × 4 blocks (F64 2 × 2), as gemm.c's
 * packing. */
static void pack_transposed_lines(char *dst, int64_t ld, const char *base, const panel *p, int64_t seg, int esz,
                                  int64_t l0) {
#if defined(__SSE2__)
  if (esz == 4) {
    float *d = (float *)dst;
    for (; l0 + 4 <= p->lines; l0 += 4) {
      const float *s0 = (const float *)base + p->loff[l0], *s1 = (const float *)base + p->loff[l0 + 1];
      const float *s2 = (const float *)base + p->loff[l0 + 2], *s3 = (const float *)base + p->loff[l0 + 3];
      int64_t k = 0;
      for (; k + 4 <= seg; k += 4) {
        __m128 r0 = _mm_loadu_ps(s0 + k), r1 = _mm_loadu_ps(s1 + k), r2 = _mm_loadu_ps(s2 + k), r3 = _mm_loadu_ps(s3 + k);
        _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
        _mm_storeu_ps(d + k * ld + l0, r0), _mm_storeu_ps(d + (k + 1) * ld + l0, r1);
        _mm_storeu_ps(d + (k + 2) * ld + l0, r2), _mm_storeu_ps(d + (k + 3) * ld + l0, r3);
      }
      for (; k < seg; k++)
        d[k * ld + l0] = s0[k], d[k * ld + l0 + 1] = s1[k], d[k * ld + l0 + 2] = s2[k], d[k * ld + l0 + 3] = s3[k];
    }
  } else {
    double *d = (double *)dst;
    for (; l0 + 2 <= p->lines; l0 += 2) {
      const double *s0 = (const double *)base + p->loff[l0], *s1 = (const double *)base + p->loff[l0 + 1];
      int64_t k = 0;
      for (; k + 2 <= seg; k += 2) {
        __m128d r0 = _mm_loadu_pd(s0 + k), r1 = _mm_loadu_pd(s1 + k);
        _mm_storeu_pd(d + k * ld + l0, _mm_unpacklo_pd(r0, r1));
        _mm_storeu_pd(d + (k + 1) * ld + l0, _mm_unpackhi_pd(r0, r1));
      }
      for (; k < seg; k++) d[k * ld + l0] = s0[k], d[k * ld + l0 + 1] = s1[k];
    }
  }
#endif
  for (int64_t l = l0; l < p->lines; l++) /* lines left over (all of them without SSE2) */
    for (int64_t k = 0; k < seg; k++)
      memcpy(dst + (k * ld + l) * esz, base + (p->loff[l] + k) * esz, (size_t)esz);
}

#if defined(PACK_X86)
/* The F32 transpose 16 lines at a time: each line's next (up to) 16
 * elements along k by one masked load (masked-off lanes never fault),
 * the 16 × 16 block transposed in registers (unpack pairs of lines, then
 * pairs of pairs, then 128-bit lanes across the groups of four and
 * eight), and each k row's 16 lines written by one 64-byte store: by
 * count of the code, about 0.4 instructions an element against 1.1 for
 * the 4 × 4 SSE2 blocks with their scalar columns (a 14-long segment
 * leaves 2). Returns the first line not done (fewer than 16 are left). */
__attribute__((target("avx512f"))) static int64_t transpose16_lines(char *dst, int64_t ld, const char *base,
                                                                    const panel *p, int64_t seg) {
  float *d = (float *)dst;
  const float *b = (const float *)base;
  int64_t l0 = 0;
  for (; l0 + 16 <= p->lines; l0 += 16)
    for (int64_t k0 = 0; k0 < seg; k0 += 16) {
      int64_t n = seg - k0 < 16 ? seg - k0 : 16;
      __mmask16 m = (__mmask16)((1u << n) - 1);
      __m512 r[16], t[16];
      for (int i = 0; i < 16; i++) r[i] = _mm512_maskz_loadu_ps(m, b + p->loff[l0 + i] + k0);
      for (int i = 0; i < 16; i += 2) /* per 128-bit lane: lines i, i+1 interleaved (k 0,1 | 2,3) */
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]), t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
      for (int g = 0; g < 16; g += 4) { /* lines g..g+3 of k 0+4j, 1+4j, 2+4j, 3+4j in lane j */
        __m512d a = _mm512_castps_pd(t[g]), c = _mm512_castps_pd(t[g + 2]);
        __m512d e = _mm512_castps_pd(t[g + 1]), f = _mm512_castps_pd(t[g + 3]);
        r[g] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c)), r[g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
        r[g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(e, f)), r[g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(e, f));
      }
      for (int q = 0; q < 4; q++) { /* lanes: (k, lines) */
        t[2 * q] = _mm512_shuffle_f32x4(r[q], r[q + 4], 0x88);     /* (q, 0-3) (q+8, 0-3) (q, 4-7) (q+8, 4-7) */
        t[2 * q + 1] = _mm512_shuffle_f32x4(r[q], r[q + 4], 0xDD); /* the same of k q+4, q+12 */
        t[8 + 2 * q] = _mm512_shuffle_f32x4(r[q + 8], r[q + 12], 0x88); /* those two of lines 8-15 */
        t[8 + 2 * q + 1] = _mm512_shuffle_f32x4(r[q + 8], r[q + 12], 0xDD);
      }
      for (int q = 0; q < 4; q++) {
        __m512 o[4] = {_mm512_shuffle_f32x4(t[2 * q], t[8 + 2 * q], 0x88),          /* k q */
                       _mm512_shuffle_f32x4(t[2 * q + 1], t[8 + 2 * q + 1], 0x88),  /* k q + 4 */
                       _mm512_shuffle_f32x4(t[2 * q], t[8 + 2 * q], 0xDD),          /* k q + 8 */
                       _mm512_shuffle_f32x4(t[2 * q + 1], t[8 + 2 * q + 1], 0xDD)}; /* k q + 12 */
        for (int j = 0; j < 4; j++)
          if (q + 4 * j < n) _mm512_storeu_ps(d + (k0 + q + 4 * j) * ld + l0, o[j]);
      }
    }
  return l0;
}

/* The same 8 lines at a time in AVX2 (an AVX2 target's panels, and the
 * 8 lines an AVX-512 target's 8-row A panel or a 16-line transposer
 * leaves): up to 8 elements along k per line by one masked load
 * (vmaskmovps: masked-off lanes never fault), the 8 × 8 block
 * transposed (unpack pairs of lines, shuffle pairs of pairs, swap
 * 128-bit lanes), one 32-byte store per k row. Returns the first line
 * not done. */
__attribute__((target("avx2"))) static int64_t transpose8_lines(char *dst, int64_t ld, const char *base,
                                                                const panel *p, int64_t seg, int64_t l0) {
  float *d = (float *)dst;
  const float *b = (const float *)base;
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for (; l0 + 8 <= p->lines; l0 += 8)
    for (int64_t k0 = 0; k0 < seg; k0 += 8) {
      int n = seg - k0 < 8 ? (int)(seg - k0) : 8;
      __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(n), lane);
      __m256 r[8], t[8];
      for (int i = 0; i < 8; i++) r[i] = _mm256_maskload_ps(b + p->loff[l0 + i] + k0, m);
      for (int i = 0; i < 8; i += 2) /* per 128-bit lane: lines i, i+1 interleaved (k 0,1 | 2,3 of the lane) */
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]), t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
      for (int g = 0; g < 8; g += 4) { /* lines g..g+3: k j | j + 4 in the two lanes, j = 0..3 */
        r[g] = _mm256_shuffle_ps(t[g], t[g + 2], 0x44), r[g + 1] = _mm256_shuffle_ps(t[g], t[g + 2], 0xEE);
        r[g + 2] = _mm256_shuffle_ps(t[g + 1], t[g + 3], 0x44), r[g + 3] = _mm256_shuffle_ps(t[g + 1], t[g + 3], 0xEE);
      }
      for (int j = 0; j < 4; j++) { /* k j from the low lanes, k j + 4 from the high ones */
        if (j < n) _mm256_storeu_ps(d + (k0 + j) * ld + l0, _mm256_permute2f128_ps(r[j], r[j + 4], 0x20));
        if (j + 4 < n) _mm256_storeu_ps(d + (k0 + j + 4) * ld + l0, _mm256_permute2f128_ps(r[j], r[j + 4], 0x31));
      }
    }
  return l0;
}
#endif

/* The transposer of a panel: F32 16 lines at a time where the packs
 * run AVX-512 (pack_bits), then 8 at a time where they run AVX2 or
 * wider, the rest (and F64) in the SSE2 blocks. */
static void transpose_lines(char *dst, int64_t ld, const char *base, const panel *p, int64_t seg, int esz) {
  int64_t l0 = 0;
#if defined(PACK_X86)
  int bits = esz == 4 ? pack_bits() : 0;
  if (bits >= 512) l0 = transpose16_lines(dst, ld, base, p, seg);
  if (bits >= 256 && p->lines - l0 >= 8) l0 = transpose8_lines(dst, ld, base, p, seg, l0);
#endif
  if (l0 < p->lines) pack_transposed_lines(dst, ld, base, p, seg, esz, l0);
}

/* Copies len elements (16-byte vectors, the last one ending at len and
 * overlapping the one before; nothing outside [0, len) is touched). */
static inline __attribute__((always_inline)) void copy_run(char *d, const char *s, int64_t len, int esz) {
  int64_t bytes = len * esz, i = 0;
#if defined(__SSE2__)
  if (bytes >= 16) {
    for (; i + 16 <= bytes; i += 16) _mm_storeu_si128((__m128i *)(d + i), _mm_loadu_si128((const __m128i *)(s + i)));
    if (i < bytes) _mm_storeu_si128((__m128i *)(d + bytes - 16), _mm_loadu_si128((const __m128i *)(s + bytes - 16)));
    return;
  }
#endif
  for (; i < bytes; i += esz) memcpy(d + i, s + i, (size_t)esz);
}

/* A k row of a panel whose every line is its own run: one element per
 * line, loaded directly (no copy_run per element). Lines 2 apart in F32
 * (a stride-2 convolution's windows along a row) take the even elements
 * of two 16-byte loads; the loads stay below the last element read. */
static inline __attribute__((always_inline)) void copy_lines(char *d, const char *src, const panel *p, int esz) {
  int64_t l = 0, n = p->lines;
  if (esz == 8) {
    for (; l < n; l++) ((double *)d)[l] = ((const double *)src)[p->loff[l]];
    return;
  }
  float *df = (float *)d;
  const float *sf = (const float *)src;
#if defined(__SSE2__)
  if (p->step == 2) {
    const float *s0 = sf + p->loff[0];
    for (; l + 5 <= n; l += 4) { /* reads s0[2l .. 2l + 7], below s0[2(n - 1)] */
      __m128 lo = _mm_loadu_ps(s0 + 2 * l), hi = _mm_loadu_ps(s0 + 2 * l + 4);
      _mm_storeu_ps(df + l, _mm_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0)));
    }
  }
#endif
  for (; l < n; l++) df[l] = sf[p->loff[l]];
}

/* Prefetches the first 64 bytes of each run of a panel whose lines
 * start at `at`: the next segment along k of a transposed panel
 * (pack_panel), a k row K_AHEAD rows ahead of a run-major one (the
 * runs copiers). On a Zen 5 host the packs' loads stalled on L2 and
 * memory: a convolution's window view walks its channel planes (1 KB
 * apart in conv2) one after another, which the hardware prefetchers do
 * not follow. Measured there (harnesses of 100 calls in one process,
 * alternated): conv2's weight gradient (transposed) 4.59–4.68 →
 * 4.21–4.39 ms a call; its forward (run-major, conv + bias) 4.57–4.73
 * → 3.95–3.98 ms, as close to the same product over contiguous
 * columns (3.0–3.2 ms) as the pad and bias kernels (about 0.9 ms)
 * leave; 9, 12 and 36 rows ahead gave less. Under KILN_CPU=x86-64-v3
 * (the AVX2 copies) no change: the AVX2 product hides the pack. */
enum { K_AHEAD = 16 };

static void prefetch_runs(const char *at, const panel *p, int esz) {
  for (int64_t r = 0; r < p->nruns; r++) {
    const char *x = at + p->loff[p->run_at[r]] * esz;
    __builtin_prefetch(x), __builtin_prefetch(x + 63);
  }
}

/* ------------------------------------------- run-major row packing */

/* A panel whose lines form runs longer than one element (a stride-1
 * convolution's output rows as B's columns) is packed k row by k row,
 * the rows' input offsets computed once per call for all its panels
 * (k_rows; rows past KCHUNK per panel), each
 * row's runs copied as wide as the host allows and the JIT's target
 * (KILN_CPU) runs: AVX-512F vectors assembled by masked loads, AVX2
 * 32-byte moves (the last overlapping the one before), else copy_run's
 * 16 bytes. */
enum { KCHUNK = 512 }; /* k rows whose offsets are computed at a time (KC is 384 by default) */

typedef void (*runs_fn)(char *dst, int64_t ld, const char *base, const panel *p, const int64_t *koff, int64_t n,
                        int esz);

/* A run: its first line (a), length, and input offset. */
#define RUN_OF(p, r, a, len, lo)                                                                                  \
  int64_t a = (p)->run_at[r], len = ((r) + 1 < (p)->nruns ? (p)->run_at[(r) + 1] : (p)->lines) - a,           \
          lo = (p)->loff[a]

/* The k rows go in order, each row's runs in turn: a panel (KC × NR,
 * e.g. 36 KiB) may not fit L1, and a run-by-run sweep would write it
 * once per run. */
static void runs_baseline(char *dst, int64_t ld, const char *base, const panel *p, const int64_t *koff, int64_t n,
                          int esz) {
  for (int64_t k = 0; k < n; k++)
    for (int64_t r = 0; r < p->nruns; r++) {
      RUN_OF(p, r, a, len, lo);
      if (esz == 4) copy_run(dst + (k * ld + a) * 4, base + (koff[k] + lo) * 4, len, 4);
      else copy_run(dst + (k * ld + a) * 8, base + (koff[k] + lo) * 8, len, 8);
    }
}

#if defined(PACK_X86)
__attribute__((target("avx2"))) static void runs_avx2(char *dst, int64_t ld, const char *base, const panel *p,
                                                      const int64_t *koff, int64_t n, int esz) {
  for (int64_t k = 0; k < n; k++) {
    if (k + K_AHEAD < n) prefetch_runs(base + koff[k + K_AHEAD] * esz, p, esz);
    for (int64_t r = 0; r < p->nruns; r++) {
      RUN_OF(p, r, a, len, lo);
      char *d = dst + (k * ld + a) * esz;
      const char *src = base + (koff[k] + lo) * esz;
      int64_t bytes = len * esz, i = 0;
      if (bytes < 32) { /* copy_run's 16-byte moves (or elements) */
        copy_run(d, src, len, esz);
        continue;
      }
      for (; i + 32 <= bytes; i += 32)
        _mm256_storeu_si256((__m256i *)(d + i), _mm256_loadu_si256((const __m256i *)(src + i)));
      if (i < bytes)
        _mm256_storeu_si256((__m256i *)(d + bytes - 32), _mm256_loadu_si256((const __m256i *)(src + bytes - 32)));
    }
  }
}

/* Each 64-byte vector of a k row is assembled from its runs' parts by
 * masked loads (one per run it holds: the lanes of the run, read from
 * the run's input with the vector's lane 0 mapped before it; masked-off
 * lanes never fault) and written by one store (masked for a last,
 * partial vector), so no store straddles a run boundary: a stride-1
 * convolution's 32-column panel row of runs 14, 14, 4 is four masked
 * loads and two aligned stores. */
typedef struct run_piece {
  int64_t off;  /* bytes from the k row's input origin to the vector's lane 0 */
  __mmask16 m;  /* the run's lanes in the vector */
  int vec;
} run_piece;

__attribute__((target("avx512f"))) static void runs_avx512(char *dst, int64_t ld, const char *base, const panel *p,
                                                           const int64_t *koff, int64_t n, int esz) {
  int64_t vl = 64 / esz, nvec = (ld + vl - 1) / vl, np = 0;
  run_piece piece[2 * PANEL_MAX];
  for (int64_t r = 0; r < p->nruns; r++) {
    RUN_OF(p, r, a, len, lo);
    for (int64_t l = a; l < a + len;) {
      int64_t v = l / vl, end = (v + 1) * vl < a + len ? (v + 1) * vl : a + len;
      piece[np++] = (run_piece){.off = (lo - a + v * vl) * esz,
                                .m = (__mmask16)(((1u << (end - v * vl)) - 1) & ~((1u << (l - v * vl)) - 1)),
                                .vec = (int)v};
      l = end;
    }
  }
  __mmask16 tail = (__mmask16)((1u << (ld - (nvec - 1) * vl)) - 1);
  for (int64_t k = 0; k < n; k++) {
    char *d = dst + k * ld * esz;
    const char *row = base + koff[k] * esz;
    if (k + K_AHEAD < n) prefetch_runs(base + koff[k + K_AHEAD] * esz, p, esz);
    int64_t q = 0;
    for (int v = 0; v < nvec; v++) {
      __m512i x = _mm512_setzero_si512();
      for (; q < np && piece[q].vec == v; q++) {
        const char *src = row + piece[q].off;
        if (esz == 4) x = _mm512_mask_loadu_epi32(x, piece[q].m, src);
        else x = _mm512_mask_loadu_epi64(x, (__mmask8)piece[q].m, src);
      }
      if (v + 1 < nvec || ld % vl == 0) _mm512_storeu_si512((void *)(d + v * 64), x);
      else if (esz == 4) _mm512_mask_storeu_epi32(d + v * 64, tail, x);
      else _mm512_mask_storeu_epi64(d + v * 64, (__mmask8)tail, x);
    }
  }
}
#endif

/* The widest run copier the host has and the JIT's target runs (read
 * once). */
static runs_fn runs_copier(void) {
#if defined(PACK_X86)
  int bits = pack_bits();
  if (bits >= 512) return runs_avx512;
  if (bits >= 256) return runs_avx2;
#endif
  return runs_baseline;
}

/* Whether k's sub-dims [first, last) end in one of stride 1 spanning at
 * least 8 elements (a stride-1 convolution's output rows, read as B's
 * K): lines are then read along k. */
static bool along_k(const graph_split_view *s, int first, int last) {
  return last - 1 >= first && s->strides[last - 1] == 1 && s->sizes[last - 1] >= 8;
}

/* Packs one panel's kc rows, k from w, when the panel is not copied run
 * by run (run_major): lines of several runs read along k are transposed
 * segment by segment; otherwise every line is a run of one, and each k
 * row loads the lines' elements (copy_lines). */
static void pack_panel(char *dst, int64_t ld, const char *base, const panel *p, sub_walk *w,
                       const graph_split_view *s, int64_t kc, int esz) {
  int inner = w->last - 1;
  bool transpose = p->nruns > 1 && along_k(s, w->first, w->last);
  for (int64_t k = 0; k < kc;) {
    char *d = dst + k * ld * esz;
    if (transpose) {
      int64_t seg = s->sizes[inner] - w->idx[inner], at = w->off;
      if (seg > kc - k) seg = kc - k;
      for (int64_t z = 0; z < seg; z++) walk_next(w, s);
      if (k + seg < kc) prefetch_runs(base + w->off * esz, p, esz);
      transpose_lines(d, ld, base + at * esz, p, seg, esz);
      k += seg;
    } else {
      if (esz == 4) copy_lines(d, base + w->off * esz, p, 4);
      else copy_lines(d, base + w->off * esz, p, 8);
      walk_next(w, s);
      k++;
    }
  }
  if (p->lines < ld)
    for (int64_t k = 0; k < kc; k++) memset(dst + (k * ld + p->lines) * esz, 0, (size_t)((ld - p->lines) * esz));
}

/* Whether panel p's k rows are copied run by run (runs_copier): a run
 * is longer than one element, and pack_panel would not transpose the
 * runs along k. */
static bool run_major(const panel *p, const graph_split_view *s, int kdim) {
  return p->nruns < p->lines && !(p->nruns > 1 && along_k(s, s->first[kdim], s->first[kdim + 1]));
}

/* The input offsets of a call's first k rows (up to KCHUNK: all of
 * them at the default KC), computed for its first run-major panel and
 * read by the others (n 0: not yet). */
typedef struct k_rows {
  int64_t n;
  int64_t off[KCHUNK];
} k_rows;

/* Offsets of the n k rows from k into off. */
static void k_offsets(int64_t *off, const graph_split_view *s, int kdim, int64_t k, int64_t n) {
  sub_walk w;
  walk_start(&w, s, kdim, k);
  for (int64_t z = 0; z < n; z++) off[z] = w.off, walk_next(&w, s);
}

/* Panel p at dst, k rows [k0, k0 + kc) row by row: the first KCHUNK
 * from the call's shared offsets (first), any further ones in chunks of
 * KCHUNK whose offsets this panel computes. */
static void pack_runs(char *dst, int64_t ld, const char *base, const panel *p, const graph_split_view *s, int kdim,
                      int64_t k0, int64_t kc, int esz, k_rows *first) {
  runs_fn copy = runs_copier();
  if (!first->n) {
    first->n = kc < KCHUNK ? kc : KCHUNK;
    k_offsets(first->off, s, kdim, k0, first->n);
  }
  copy(dst, ld, base, p, first->off, first->n, esz);
  for (int64_t k = KCHUNK; k < kc; k += KCHUNK) {
    int64_t koff[KCHUNK], n = kc - k < KCHUNK ? kc - k : KCHUNK;
    k_offsets(koff, s, kdim, k0 + k, n);
    copy(dst + k * ld * esz, ld, base, p, koff, n, esz);
  }
  if (p->lines < ld)
    for (int64_t k = 0; k < kc; k++) memset(dst + (k * ld + p->lines) * esz, 0, (size_t)((ld - p->lines) * esz));
}

void rt_gemm_pack_split(char *dst, const char *base, const graph_split_view *s, int ldim, int64_t l0,
                        int64_t lines, int64_t ld, int kdim, int64_t k0, int64_t kc, int esz) {
  sub_walk lw;
  walk_start(&lw, s, ldim, l0);
  k_rows first = {.n = 0};
  for (int64_t i = 0; i < lines; i += ld) {
    panel p = {.lines = lines - i < ld ? lines - i : ld};
    for (int64_t l = 0; l < p.lines; l++) {
      p.loff[l] = lw.off;
      if (l == 0 || p.loff[l] != p.loff[l - 1] + 1) p.run_at[p.nruns++] = l;
      walk_next(&lw, s);
    }
    p.step = p.nruns == p.lines && p.lines > 1 ? p.loff[1] - p.loff[0] : 0;
    for (int64_t l = 2; l < p.lines && p.step > 1; l++)
      if (p.loff[l] - p.loff[l - 1] != p.step) p.step = 0;
    if (run_major(&p, s, kdim)) {
      pack_runs(dst + i * kc * esz, ld, base, &p, s, kdim, k0, kc, esz, &first);
      continue;
    }
    sub_walk w;
    walk_start(&w, s, kdim, k0);
    pack_panel(dst + i * kc * esz, ld, base, &p, &w, s, kc, esz);
  }
}
