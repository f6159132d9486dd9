/*
 * gemm.c — the generated GEMM's driver: a MATMUL node (F32/F64) computed
 * by the LLVM micro-kernel of codegen_llvm/llvm_gemm.c inside BLIS's five
 * loops (Van Zee & van de Geijn, TOMS 2015; Goto & van de Geijn, TOMS
 * 2008), on Kiln's pool. docs/internals.md, "The generated GEMM".
 *
 * For one product C [M, N] = A [M, K] · B [K, N] (each batch):
 *
 *   for jc in N by NC                         B block: KC × NC, in L3
 *     for pc in K by KC                         pack B[pc.., jc..] into NR-column panels
 *       for ic in M by MC                       A block: MC × KC, in L2
 *         pack A[ic.., pc..] into MR-row panels
 *         for jr in NC by NR                    B panel: KC × NR, in L1
 *           for ir in MC by MR
 *             micro-kernel: C[ic+ir.., jc+jr..] (+)= A panel · B panel
 *
 * Packing reads each operand through its strided view (offset, row and
 * column strides in elements, batch strides possibly 0), so a transposed,
 * narrowed, broadcast or as_strided operand costs no pass of its own; an
 * operand that is a pending reshape copy (a convolution's im2col
 * columns) is packed from the copy's input (gemm_pack.c); a
 * panel's rows past M (columns past N) are zeros, so every micro-kernel
 * call computes a whole MR×NR tile. A tile that sticks out of C is
 * computed into a small aligned tile on the stack (C's old value copied
 * in first when accumulating) and its valid part copied out. The first
 * KC block assigns C (beta 0), later ones add to it (beta 1); K = 0
 * zeroes C. A fused epilogue (gemm_epilogue.h: bias, relu, scale,
 * residual) is applied by the micro-kernel on the last KC block, to the
 * tile in registers; an edge tile's operands are zero-padded copies
 * (rt_gemm_epi_tile). A general epilogue (gemm_group.c: GELU, a cast,
 * any elementwise group) is a kernel the driver calls for each MC × NR
 * column panel of the last KC block, whose tiles the micro-kernel stores
 * into a block in L1 instead of C (block_panel; C keeps only the earlier
 * KC blocks' sums). A skinny product (N at most NR/2, M larger) without
 * an epilogue runs as Cᵀ = Bᵀ·Aᵀ into scratch, transposed into C after
 * (swap_pays).
 *
 * Parallel: items are (batch, part of M, part of N, part of K); when there
 * are fewer batches than pool threads, each batch's C is cut into pm × pn
 * parts (multiples of MR and NR; plan_parts picks the factorisation of the
 * parts per batch with the least work per part, the packing it repeats
 * included). A product of few tiles, or of one batch with a very long K
 * (weight gradients), is also cut along K, by its shape alone
 * (plan_k_parts): each K part sums its own run of KC blocks, and the
 * parts are added in order after. Each
 * pool chunk packs into its own scratch (from the caching allocator,
 * 64-byte aligned). Every element of C sums its K products in the same
 * order (KC blocks in order, k in order inside, K parts in order) whatever
 * the split and thread count: results are deterministic, and equal for
 * any thread count.
 *
 * The micro-kernel's MR is chosen per product for its M
 * (llvm_gemm_choose_rows: a shorter tile where the target's would pad
 * the last row tile; chosen again for a swapped product's M).
 *
 * Blocking: KC so that a B panel (KC × NR) takes about half of L1 (at
 * least 384 deep, KC_MIN), MC so
 * that an A block (MC × KC) takes about half of L2, NC so that a B block
 * takes a quarter of L3 (at most 4096 columns), from the cache sizes read
 * once (sysconf, else /sys/devices/system/cpu/cpu0/cache, else 32 KiB /
 * 512 KiB / 8 MiB; an L3 above 64 MiB, as some VMs report, counts as
 * 64 MiB).
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#include <xmmintrin.h>
#endif

#include "gemm_epilogue.h"
#include "matmul_dims.h"
#include "pool.h"
#include "rt_internal.h"

/* ------------------------------------------------------------ blocking */

/* Size in bytes of cpu0's cache of `level` (1: data) from sysfs, or 0. */
static int64_t sysfs_cache(int level) {
  for (int i = 0; i < 8; i++) {
    char path[96], buf[32] = "";
    int64_t lv = 0, kb = 0;
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    bool ok = fscanf(f, "%lld", (long long *)&lv) == 1;
    fclose(f);
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/type", i);
    f = fopen(path, "r");
    if (f && fgets(buf, sizeof buf, f) && strncmp(buf, "Instruction", 11) == 0) ok = false;
    if (f) fclose(f);
    if (!ok || lv != level) continue;
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
    f = fopen(path, "r");
    if (f && fscanf(f, "%lldK", (long long *)&kb) == 1) ok = kb > 0;
    if (f) fclose(f);
    if (ok) return kb * 1024;
  }
  return 0;
}

/* Cache size of `level`: sysconf, else sysfs, else `fallback`. */
static int64_t cache_size(int level, int64_t fallback) {
  long v = level == 1 ? sysconf(_SC_LEVEL1_DCACHE_SIZE) : level == 2 ? sysconf(_SC_LEVEL2_CACHE_SIZE)
                                                                     : sysconf(_SC_LEVEL3_CACHE_SIZE);
  int64_t s = v > 0 ? (int64_t)v : sysfs_cache(level);
  return s > 0 ? s : fallback;
}

static struct {
  _Atomic int64_t l1, l2, l3; /* read once (0: not yet) */
  int64_t mc, kc, nc;         /* rt_gemm_set_blocking's; 0: the rule's */
} caches;

static int64_t round_down(int64_t x, int64_t m) { return x / m * m > m ? x / m * m : m; }

void rt_gemm_set_blocking(int64_t mc, int64_t kc, int64_t nc) {
  caches.mc = mc > 0 ? mc : 0;
  caches.kc = kc > 0 ? kc : 0;
  caches.nc = nc > 0 ? nc : 0;
}

/* KC's floor: a deeper block halves the passes over C. On Zen 5 (48 KiB
 * L1) the F32 14×32 panel at 384 fills L1, and 2048³ ran 2–11 % faster
 * than at 192 (4 alternated pairs, 2 threads; 64×25088×288 0–19 %; the
 * MLP's products and F64 unchanged); AVX2's 6×16 rule gives 384 already. */
#define KC_MIN 384

rt_gemm_blocking rt_gemm_blocking_for(int mr, int nr, int esz) {
  if (!atomic_load(&caches.l1)) { /* threads racing here store the same values */
    int64_t l3 = cache_size(3, INT64_C(8) << 20);
    atomic_store(&caches.l3, l3 > (INT64_C(64) << 20) ? INT64_C(64) << 20 : l3);
    atomic_store(&caches.l2, cache_size(2, INT64_C(512) << 10));
    atomic_store(&caches.l1, cache_size(1, INT64_C(32) << 10));
  }
  int64_t l1 = atomic_load(&caches.l1), l2 = atomic_load(&caches.l2), l3 = atomic_load(&caches.l3);
  rt_gemm_blocking b;
  int64_t kc = round_down(l1 / 2 / (nr * esz), 16);
  b.kc = caches.kc ? caches.kc : kc > KC_MIN ? kc : KC_MIN;
  b.mc = round_down(caches.mc ? caches.mc : l2 / 2 / (b.kc * esz), mr);
  int64_t nc = caches.nc ? caches.nc : l3 / 4 / (b.kc * esz);
  b.nc = round_down(nc < 4096 ? nc : 4096, nr);
  return b;
}

/* ------------------------------------------------------------- packing */

/* One operand as the packs read it: element (r, c) of batch i's matrix is
 * base[mm_batch_offset(view, nb, i) + r·rs + c·cs], or, for an operand
 * read through a reshape copy (gemm_pack.c), at its split's offsets. */
typedef struct gemm_operand {
  const char *base; /* element [0, 0] of batch 0: the view's (split's) offset applied */
  const graph_view *view;
  int64_t rs, cs;
  const graph_split_view *split; /* NULL: a plain strided view */
  int rdim, cdim;                /* the split's outer dims of rows and columns */
} gemm_operand;

/* Element offset of batch i's matrix from op's base. */
static int64_t batch_offset(const gemm_operand *op, int nb, int64_t i) {
  if (!op->split) return mm_batch_offset(op->view, nb, i);
  int64_t off = 0;
  for (int d = nb - 1; d >= 0; d--) {
    off += graph_split_offset(op->split, d, i % op->view->sizes[d]);
    i /= op->view->sizes[d];
  }
  return off;
}

static inline __attribute__((always_inline)) void copy_elem(char *dst, const char *src, int esz) {
  memcpy(dst, src, (size_t)esz); /* esz is a constant in each caller below: one move */
}

/* dst[k·ld + l] = src[l·stride + k] for l < lines, k < kc: the packing
 * of an operand whose panel lines (A's rows, B's columns) are contiguous
 * along k — a transpose. On x86-64, 4 × 4 blocks of F32 (2 × 2 of F64)
 * go through SSE2 registers (the library's baseline ISA): four loads
 * and four stores instead of sixteen of each; the rest element by
 * element. */
static void pack_transposed(char *dst, int64_t ld, const char *src, int64_t stride, int64_t lines, int64_t kc,
                            int esz) {
  int64_t l0 = 0, k0 = 0;
#if defined(__SSE2__)
  if (esz == 4) {
    float *d = (float *)dst;
    const float *s = (const float *)src;
    for (l0 = 0; l0 + 4 <= lines; l0 += 4) {
      for (k0 = 0; k0 + 4 <= kc; k0 += 4) {
        __m128 r0 = _mm_loadu_ps(s + l0 * stride + k0), r1 = _mm_loadu_ps(s + (l0 + 1) * stride + k0);
        __m128 r2 = _mm_loadu_ps(s + (l0 + 2) * stride + k0), r3 = _mm_loadu_ps(s + (l0 + 3) * stride + k0);
        _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
        _mm_storeu_ps(d + k0 * ld + l0, r0), _mm_storeu_ps(d + (k0 + 1) * ld + l0, r1);
        _mm_storeu_ps(d + (k0 + 2) * ld + l0, r2), _mm_storeu_ps(d + (k0 + 3) * ld + l0, r3);
      }
      for (int64_t k = k0; k < kc; k++)
        for (int64_t l = l0; l < l0 + 4; l++) d[k * ld + l] = s[l * stride + k];
    }
  } else {
    double *d = (double *)dst;
    const double *s = (const double *)src;
    for (l0 = 0; l0 + 2 <= lines; l0 += 2) {
      for (k0 = 0; k0 + 2 <= kc; k0 += 2) {
        __m128d r0 = _mm_loadu_pd(s + l0 * stride + k0), r1 = _mm_loadu_pd(s + (l0 + 1) * stride + k0);
        _mm_storeu_pd(d + k0 * ld + l0, _mm_unpacklo_pd(r0, r1));
        _mm_storeu_pd(d + (k0 + 1) * ld + l0, _mm_unpackhi_pd(r0, r1));
      }
      for (int64_t k = k0; k < kc; k++)
        for (int64_t l = l0; l < l0 + 2; l++) d[k * ld + l] = s[l * stride + k];
    }
  }
#endif
  for (int64_t l = l0; l < lines; l++) /* lines left over (all of them without SSE2) */
    for (int64_t k = 0; k < kc; k++) {
      if (esz == 4) copy_elem(dst + (k * ld + l) * 4, src + (l * stride + k) * 4, 4);
      else copy_elem(dst + (k * ld + l) * 8, src + (l * stride + k) * 8, 8);
    }
}

/* Packs rows [0, rows) × cols [0, kc) of A at src (strides rs, cs) as one
 * MR-row panel: dst[k·mr + r], rows past `rows` zero. */
static inline __attribute__((always_inline)) void pack_a_panel(char *dst, const char *src, int64_t rs, int64_t cs,
                                                                int64_t rows, int64_t kc, int mr, int esz) {
  if (rows < mr)
    for (int64_t k = 0; k < kc; k++) memset(dst + (k * mr + rows) * esz, 0, (size_t)((mr - rows) * esz));
  if (cs == 1 && rs != 1) { /* rows contiguous: read along k */
    pack_transposed(dst, mr, src, rs, rows, kc, esz);
  } else if (rs == 1) { /* columns contiguous: a panel row is one copy */
    for (int64_t k = 0; k < kc; k++) memcpy(dst + k * mr * esz, src + k * cs * esz, (size_t)(rows * esz));
  } else {
    for (int64_t k = 0; k < kc; k++)
      for (int64_t r = 0; r < rows; r++) copy_elem(dst + (k * mr + r) * esz, src + (r * rs + k * cs) * esz, esz);
  }
}

/* Packs rows [0, kc) × cols [0, cols) of B at src as one NR-column panel:
 * dst[k·nr + c], columns past `cols` zero. */
static inline __attribute__((always_inline)) void pack_b_panel(char *dst, const char *src, int64_t rs, int64_t cs,
                                                                int64_t cols, int64_t kc, int nr, int esz) {
  if (cols < nr)
    for (int64_t k = 0; k < kc; k++) memset(dst + (k * nr + cols) * esz, 0, (size_t)((nr - cols) * esz));
  if (cs == 1 && cols * esz == 128) { /* rows contiguous, a whole panel row of 128 bytes: a fixed-size copy */
    for (int64_t k = 0; k < kc; k++) memcpy(dst + k * 128, src + k * rs * esz, 128);
  } else if (cs == 1) { /* rows contiguous */
    for (int64_t k = 0; k < kc; k++) memcpy(dst + k * nr * esz, src + k * rs * esz, (size_t)(cols * esz));
  } else if (rs == 1) { /* columns contiguous: read along k */
    pack_transposed(dst, nr, src, cs, cols, kc, esz);
  } else {
    for (int64_t k = 0; k < kc; k++)
      for (int64_t c = 0; c < cols; c++) copy_elem(dst + (k * nr + c) * esz, src + (k * rs + c * cs) * esz, esz);
  }
}

/* The panels of the mc × kc block of A whose [0, 0] is at src. */
static void pack_a(char *dst, const char *src, int64_t rs, int64_t cs, int64_t mc, int64_t kc, int mr, int esz) {
  for (int64_t i = 0; i < mc; i += mr) {
    int64_t rows = mc - i < mr ? mc - i : mr;
    const char *s = src + i * rs * esz;
    char *d = dst + i * kc * esz;
    if (esz == 4) pack_a_panel(d, s, rs, cs, rows, kc, mr, 4);
    else pack_a_panel(d, s, rs, cs, rows, kc, mr, 8);
  }
}

/* The panels of the kc × nc block of B whose [0, 0] is at src. */
static void pack_b(char *dst, const char *src, int64_t rs, int64_t cs, int64_t kc, int64_t nc, int nr, int esz) {
  for (int64_t j = 0; j < nc; j += nr) {
    int64_t cols = nc - j < nr ? nc - j : nr;
    const char *s = src + j * cs * esz;
    char *d = dst + j * kc * esz;
    if (esz == 4) pack_b_panel(d, s, rs, cs, cols, kc, nr, 4);
    else pack_b_panel(d, s, rs, cs, cols, kc, nr, 8);
  }
}

/* --------------------------------------------------------------- loops */

/* One product split over the pool (file comment). */
typedef struct gemm_job {
  mm_dims d;
  llvm_gemm_spec spec;
  llvm_gemm_fn ukr;
  rt_gemm_blocking blk;
  gemm_operand a, b;
  graph_split_view split[2]; /* the operands' splits, when read through a copy */
  char *c;             /* contiguous [batches, M, N] */
  const rt_gemm_epi *epi; /* the fused epilogue (batch 0's operands), or NULL */
  int64_t pm, pn;      /* parts of each batch's C along M and N */
  int64_t m_step, n_step; /* rows and columns of a part */
  int64_t pk, k_step;  /* parts along K (plan_k_parts) and their length */
  bool prefetch_b;     /* the macro-kernel prefetches the next B block (plan_prefetch) */
  bool stream;         /* C's whole tiles are stored with streaming stores (plan_stream) */
  char *partial;       /* [pk - 1, batches, M, N]: the sums of K parts 1.. */
  atomic_bool oom;     /* a chunk could not allocate its packing scratch */
} gemm_job;

/* The epilogue operands (epi: this batch's) of the tile at C's (r0, c0)
 * into *ea, or NULL when there is no epilogue to apply (none, or not the
 * last KC block). */
static const llvm_gemm_epi_args *epi_args(const gemm_job *j, const rt_gemm_epi *epi, int64_t flags, int64_t r0,
                                          int64_t c0, int64_t rows, int64_t cols, char *scratch,
                                          llvm_gemm_epi_args *ea) {
  if (!epi || epi->n == 0 || !(flags & LLVM_GEMM_LAST)) return NULL;
  rt_gemm_epi_tile(epi, r0, c0, rows, cols, j->spec.mr, j->spec.nr, (int)j->d.esz, scratch, ea);
  return ea;
}

/* A tile that sticks out of C: computed whole on the stack, its rows ×
 * cols copied out (C's old value copied in first when accumulating);
 * (r0, c0): its place in C, for the epilogue epi. */
static void edge_tile(const gemm_job *j, int64_t kc, const char *ap, const char *bp, char *c, int64_t rows,
                      int64_t cols, int64_t flags, const rt_gemm_epi *epi, int64_t r0, int64_t c0) {
  _Alignas(64) char tile[LLVM_GEMM_MAX_MR * LLVM_GEMM_MAX_NR * 8];
  _Alignas(64) char scratch[RT_GEMM_EPI_SCRATCH];
  llvm_gemm_epi_args ea;
  int64_t nr = j->spec.nr, esz = j->d.esz, ldc = j->d.nn;
  if (flags & LLVM_GEMM_ACCUMULATE) {
    memset(tile, 0, (size_t)(j->spec.mr * nr * esz));
    for (int64_t r = 0; r < rows; r++) memcpy(tile + r * nr * esz, c + r * ldc * esz, (size_t)(cols * esz));
  }
  j->ukr(kc, ap, bp, tile, nr, flags, epi_args(j, epi, flags, r0, c0, rows, cols, scratch, &ea));
  for (int64_t r = 0; r < rows; r++) memcpy(c + r * ldc * esz, tile + r * nr * esz, (size_t)(cols * esz));
}

/* The last KC block of one column panel (mc × cols, C at c) under a
 * general epilogue: its tiles go to `block` (round_up(mc, MR) rows of
 * NR, in L1; C's old sums copied in first when accumulating), so the
 * product is never stored to C, then the epilogue's hook reads them
 * there and writes its result. */
static void block_panel(const gemm_job *j, const char *apack, const char *bp, const char *c, int64_t mc, int64_t cols,
                        int64_t kc, int64_t flags, const rt_gemm_epi *epi, int64_t ic, int64_t c0, char *block) {
  int64_t mr = j->spec.mr, nr = j->spec.nr, esz = j->d.esz, ldc = j->d.nn;
  for (int64_t ir = 0; ir < mc; ir += mr) {
    char *bt = block + ir * nr * esz;
    int64_t rows = mc - ir < mr ? mc - ir : mr;
    if (flags & LLVM_GEMM_ACCUMULATE) {
      if (rows < mr || cols < nr) memset(bt, 0, (size_t)(mr * nr * esz));
      for (int64_t r = 0; r < rows; r++)
        memcpy(bt + r * nr * esz, c + ((ir + r) * ldc) * esz, (size_t)(cols * esz));
    }
    j->ukr(kc, apack + ir * kc * esz, bp, bt, nr, flags, NULL);
  }
  epi->after(epi->after_ctx, ic, c0, mc, cols, block);
}

/* The source of the next B block, prefetched into L2 across the
 * macro-kernel's calls (plan_prefetch): `rows` rows of `bytes`
 * contiguous bytes, `stride` bytes apart, `per_call` cache lines before
 * each micro-kernel call, from row `row`, byte `at`; NULL src: none. */
typedef struct b_prefetch {
  const char *src;
  int64_t stride, bytes, rows, per_call, row, at;
} b_prefetch;

static inline void prefetch_step(b_prefetch *pf) {
  for (int64_t i = 0; i < pf->per_call && pf->row < pf->rows; i++) {
    __builtin_prefetch(pf->src + pf->row * pf->stride + pf->at, 0, 2); /* prefetcht1: L2 */
    if ((pf->at += 64) >= pf->bytes) pf->at = 0, pf->row++;
  }
}

/* LLVM_GEMM_STREAM for a whole tile when the job streams C (plan_stream)
 * and this call stores C's final values (its one KC block); else 0. The
 * tile is vector-aligned then: plan_stream checked C and its row
 * length, and a whole tile starts at a multiple of NR columns (n_step
 * and NC are multiples of NR, and NR is whole vectors). */
static int64_t stream_flag(const gemm_job *j, int64_t flags) {
  bool once = (flags & LLVM_GEMM_LAST) && !(flags & LLVM_GEMM_ACCUMULATE);
  return j->stream && once ? LLVM_GEMM_STREAM : 0;
}

/* The macro-kernel: every MR×NR tile of the packed mc × kc A block and
 * kc × nc B block, into C at c (row stride N), which is C's (ic, jc);
 * epi: the batch's epilogue, or NULL; block: a general epilogue's
 * scratch (block_panel), or NULL. */
static void macro_kernel(const gemm_job *j, const char *apack, const char *bpack, char *c, int64_t mc, int64_t nc,
                         int64_t kc, int64_t flags, const rt_gemm_epi *epi, int64_t ic, int64_t jc, char *block,
                         b_prefetch *pf) {
  int64_t mr = j->spec.mr, nr = j->spec.nr, esz = j->d.esz, ldc = j->d.nn;
  for (int64_t jr = 0; jr < nc; jr += nr) {
    const char *bp = bpack + jr * kc * esz;
    int64_t cols = nc - jr < nr ? nc - jr : nr;
    if (block && (flags & LLVM_GEMM_LAST)) {
      block_panel(j, apack, bp, c + jr * esz, mc, cols, kc, flags, epi, ic, jc + jr, block);
      continue;
    }
    for (int64_t ir = 0; ir < mc; ir += mr) {
      const char *ap = apack + ir * kc * esz;
      char *ct = c + (ir * ldc + jr) * esz;
      int64_t rows = mc - ir < mr ? mc - ir : mr;
      llvm_gemm_epi_args ea;
      if (pf->src) prefetch_step(pf);
      if (rows == mr && cols == nr)
        j->ukr(kc, ap, bp, ct, ldc, flags | stream_flag(j, flags),
               epi_args(j, epi, flags, ic + ir, jc + jr, rows, cols, NULL, &ea));
      else edge_tile(j, kc, ap, bp, ct, rows, cols, flags, epi, ic + ir, jc + jr);
    }
  }
}

/* One item of the split: rows [m0, m1) × columns [n0, n1) of batch i's
 * C, summing K's [k0, k1) (into C for the first K part, else into that
 * part's partial sums). */
typedef struct gemm_part {
  int64_t i, m0, m1, n0, n1, k0, k1;
  char *c; /* batch i's C, or its partial sums */
} gemm_part;

/* One part: the five loops. */
static void run_part(const gemm_job *j, const gemm_part *q, char *apack, char *bpack, char *block) {
  const mm_dims *d = &j->d;
  int64_t esz = d->esz, mr = j->spec.mr, nr = j->spec.nr, i = q->i, m0 = q->m0, m1 = q->m1, n0 = q->n0, n1 = q->n1;
  const char *a = j->a.base + batch_offset(&j->a, d->nb, i) * esz;
  const char *b = j->b.base + batch_offset(&j->b, d->nb, i) * esz;
  char *c = q->c;
  rt_gemm_epi batch_epi; /* the epilogue's operands of batch i */
  const rt_gemm_epi *epi = NULL;
  if (j->epi) rt_gemm_epi_batch(j->epi, i, &batch_epi), epi = &batch_epi;
  int64_t packed_ic = -1, packed_pc = -1; /* the A block apack holds (the same for every jc) */
  for (int64_t jc = n0; jc < n1; jc += j->blk.nc) {
    int64_t nc = n1 - jc < j->blk.nc ? n1 - jc : j->blk.nc;
    for (int64_t pc = q->k0; pc < q->k1; pc += j->blk.kc) {
      int64_t kc = q->k1 - pc < j->blk.kc ? q->k1 - pc : j->blk.kc;
      int64_t flags = (pc > q->k0 ? LLVM_GEMM_ACCUMULATE : 0) | (pc + kc == q->k1 ? LLVM_GEMM_LAST : 0);
      if (j->b.split) rt_gemm_pack_split(bpack, b, j->b.split, j->b.cdim, jc, nc, nr, j->b.rdim, pc, kc, (int)esz);
      else pack_b(bpack, b + (pc * j->b.rs + jc * j->b.cs) * esz, j->b.rs, j->b.cs, kc, nc, (int)nr, (int)esz);
      b_prefetch pf = {0};
      if (j->prefetch_b && jc + nc < n1) { /* (one KC block: the next block is the next jc's) */
        int64_t next = n1 - jc - nc < j->blk.nc ? n1 - jc - nc : j->blk.nc;
        int64_t calls = (nc + nr - 1) / nr * ((m1 - m0 + mr - 1) / mr), lines = kc * ((next * esz + 63) / 64);
        pf = (b_prefetch){.src = b + (pc * j->b.rs + jc + nc) * esz, .stride = j->b.rs * esz, .bytes = next * esz,
                          .rows = kc, .per_call = (lines + calls - 1) / calls};
      }
      for (int64_t ic = m0; ic < m1; ic += j->blk.mc) {
        int64_t mc = m1 - ic < j->blk.mc ? m1 - ic : j->blk.mc;
        if (ic != packed_ic || pc != packed_pc) {
          if (j->a.split)
            rt_gemm_pack_split(apack, a, j->a.split, j->a.rdim, ic, mc, mr, j->a.cdim, pc, kc, (int)esz);
          else pack_a(apack, a + (ic * j->a.rs + pc * j->a.cs) * esz, j->a.rs, j->a.cs, mc, kc, (int)mr, (int)esz);
          packed_ic = ic, packed_pc = pc;
        }
        macro_kernel(j, apack, bpack, c + (ic * d->nn + jc) * esz, mc, nc, kc, flags, epi, ic, jc, block, &pf);
      }
    }
  }
}

static int64_t min64(int64_t x, int64_t y) { return x < y ? x : y; }
static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

/* Pool chunk: items [start, end), each (batch, part along M, part along
 * N, part along K), with one packing scratch for the chunk. */
static void gemm_chunk(void *const *bufs, int64_t start, int64_t end) {
  gemm_job *j = bufs[0];
  const mm_dims *d = &j->d;
  int64_t kc = min64(j->blk.kc, d->k), esz = d->esz;
  int64_t a_bytes = round_up(min64(j->blk.mc, j->m_step), j->spec.mr) * kc * esz;
  int64_t b_bytes = round_up(min64(j->blk.nc, j->n_step), j->spec.nr) * kc * esz;
  /* a general epilogue's block (block_panel): MC rows of NR */
  int64_t blk_bytes = j->epi && j->epi->after ? round_up(min64(j->blk.mc, j->m_step), j->spec.mr) * j->spec.nr * esz : 0;
  graph_buffer *scratch = graph_buffer_alloc(round_up(a_bytes, 64) + round_up(b_bytes, 64) + blk_bytes);
  if (!scratch) {
    atomic_store(&j->oom, true);
    return;
  }
  char *apack = scratch->data, *bpack = apack + round_up(a_bytes, 64);
  char *block = blk_bytes ? bpack + round_up(b_bytes, 64) : NULL;
  int64_t c_elems = d->batches * d->m * d->nn;
  for (int64_t it = start; it < end; it++) {
    int64_t per = j->pm * j->pn * j->pk, i = it / per, r = it % per, ik = r % j->pk;
    int64_t im = r / j->pk / j->pn, in = r / j->pk % j->pn;
    gemm_part q = {.i = i, .m0 = im * j->m_step, .n0 = in * j->n_step, .k0 = ik * j->k_step};
    q.m1 = min64(d->m, q.m0 + j->m_step), q.n1 = min64(d->nn, q.n0 + j->n_step), q.k1 = min64(d->k, q.k0 + j->k_step);
    q.c = (ik == 0 ? j->c : j->partial + (ik - 1) * c_elems * esz) + i * d->m * d->nn * esz;
    if (q.m0 < d->m && q.n0 < d->nn) run_part(j, &q, apack, bpack, block);
  }
  if (j->stream) atomic_thread_fence(memory_order_seq_cst); /* orders the streaming stores before the pool's join */
  graph_buffer_release(scratch);
}

/* Parts per batch (pm along M, pn along N) when there are fewer batches
 * than threads: of the factorisations of ⌈threads / batches⌉ that leave
 * no part empty, the one whose part costs least — its multiply-adds
 * (padded to whole tiles) plus 16 per element it packs (the part's rows
 * of A and columns of B, times K: packing moves about one element in the
 * time of 16 multiply-adds). Ties go to fewer parts along M. */
static void plan_parts(gemm_job *j, int threads) {
  const mm_dims *d = &j->d;
  int64_t mr = j->spec.mr, nr = j->spec.nr, mt = (d->m + mr - 1) / mr, nt = (d->nn + nr - 1) / nr;
  int64_t units = d->batches * j->pk; /* items before M and N are cut */
  int64_t p = units >= threads ? 1 : (threads + units - 1) / units;
  double best = -1;
  j->pm = j->pn = 1;
  for (int64_t pm = 1; pm <= p; pm++) {
    int64_t pn = p / pm;
    if (p % pm || pm > mt || pn > nt) continue;
    double rows = (double)((mt + pm - 1) / pm * mr), cols = (double)((nt + pn - 1) / pn * nr);
    double cost = rows * cols * (double)d->k + 16.0 * (rows + cols) * (double)d->k;
    if (best < 0 || cost < best) best = cost, j->pm = pm, j->pn = pn;
  }
  j->m_step = (mt + j->pm - 1) / j->pm * mr;
  j->n_step = (nt + j->pn - 1) / j->pn * nr;
}

/* Parts along K, from the shape alone (never the thread count, so the
 * sums stay the same for any), for a product without an epilogue whose K
 * spans at least 2·K_SPLIT_BLOCKS KC blocks and that either has fewer
 * than K_SPLIT_TILES MR×NR tiles in all (a weight gradient with few
 * channels: 32×9×100352, one tile, which cutting M and N cannot spread
 * over the threads) or is one batch with K_SPLIT_LONG KC blocks or more
 * whose partial sums move at most a quarter of the elements its packing
 * does (64×288×25088, conv2's weight gradient: cut along N, each thread
 * packed all of A; cut along K, each packs its own K's share of both).
 * K is cut into up to K_SPLIT_MAX runs of whole KC blocks, each at least
 * K_SPLIT_BLOCKS long. A part sums its run into C (the first) or its own
 * partial sums; sum_partials adds them in order. */
#define K_SPLIT_TILES 8
#define K_SPLIT_BLOCKS 8
#define K_SPLIT_LONG 32
#define K_SPLIT_MAX 8
static void plan_k_parts(gemm_job *j) {
  const mm_dims *d = &j->d;
  int64_t mr = j->spec.mr, nr = j->spec.nr, kc = j->blk.kc;
  int64_t tiles = d->batches * ((d->m + mr - 1) / mr) * ((d->nn + nr - 1) / nr);
  int64_t pk = min64(K_SPLIT_MAX, d->k / (K_SPLIT_BLOCKS * kc));
  bool few_tiles = tiles < K_SPLIT_TILES;
  bool long_k = d->batches == 1 && d->k >= K_SPLIT_LONG * kc && 4 * (pk - 1) * d->m * d->nn <= d->k * (d->m + d->nn);
  j->pk = 1, j->k_step = d->k;
  if (j->epi || pk < 2 || !(few_tiles || long_k)) return;
  j->k_step = round_up((d->k + pk - 1) / pk, kc);
  j->pk = (d->k + j->k_step - 1) / j->k_step;
}

/* A part with one A block (its rows fit MC, K fits KC) whose B is
 * bigger than L2 and no narrower than C's part (M ≤ K) reads each B
 * element from memory for only M multiply-adds: its packing would stall
 * on memory between the blocks' products (64×25088×288 packs 29 MB).
 * Its B blocks are then kept to a quarter of L2 (NC cut), so a packed
 * panel is still in L2 when the micro-kernel reads it.
 *
 * When B is a plain view with contiguous rows, the macro-kernel also
 * prefetches the next block's lines into L2, spread over its calls
 * (prefetch_step), so the pack reads them from there. On a Zen 4 host
 * (gemm_tune --threads 2, three alternated runs against the build
 * before) 64×25088×288 went from 140–165 to 178–201 GFLOP/s (OpenBLAS
 * 154–187); a block past L2 (NC 1,024), T0 prefetches, bursts before
 * each block, and a product bound by its stores (32×100352×9, M > K)
 * lost.
 *
 * A B read through a reshape copy (gemm_pack.c: conv2's forward window
 * view) gets the cut alone. Uncut, its packed 4,096-column blocks
 * (4.7 MB) went to L3 and back: on a Zen 5 host the cut took conv2's
 * forward (conv + bias, a harness of 100 runs, three alternated pairs)
 * from 5.05–5.27 to 4.30–4.45 ms best, and fashion_cnn's
 * gemm_64x25088x288 from 5.6–6.1 to 5.0–5.3 ms a step. Under
 * KILN_CPU=x86-64-v3 it changed nothing: the AVX2 product hides the
 * pack. */
static void plan_prefetch(gemm_job *j) {
  const mm_dims *d = &j->d;
  int64_t kc = min64(j->blk.kc, d->k), esz = d->esz, l2 = atomic_load(&caches.l2);
  bool streams = d->k <= j->blk.kc && j->pk == 1 && j->m_step <= j->blk.mc &&
                 kc * j->n_step * esz > l2 /* (a part's B that L2 holds is not streamed) */
                 && j->m_step <= kc;       /* (more of C than of B: the stores bound it, K = 9 lost) */
  j->prefetch_b = streams && !j->b.split && j->b.cs == 1;
  if (!(j->prefetch_b || (streams && j->b.split)) || caches.nc) return; /* (rt_gemm_set_blocking's NC stays) */
  int64_t nc = round_down(l2 / 4 / (kc * esz), j->spec.nr);
  if (nc < j->blk.nc) j->blk.nc = nc;
}

/* A product whose C is stored once (one K part, K within one KC block)
 * and is larger than KILN_GEMM_STREAM_BYTES (default 16 MiB, far past
 * the L2s) stores its whole tiles with streaming stores, when C's rows
 * are vector-aligned: a plain store reads each line before writing it,
 * so a product with a short K (few multiply-adds per element of C) is
 * bound by twice C's bytes of memory traffic. A convolution's input
 * gradient columns are one: 288×25088×64 in fashion_cnn writes 29 MB of
 * columns, which the col2im kernel reads after. */
static int64_t read_gemm_stream_bytes(void) {
  const char *e = getenv("KILN_GEMM_STREAM_BYTES");
  int64_t bytes = e ? atoll(e) : INT64_C(16) << 20;
  return bytes <= 0 ? INT64_MAX : bytes;
}

static void plan_stream(gemm_job *j, bool scratch_c) {
  static atomic_int_fast64_t limit = GRAPH_ENV_UNREAD;
  const mm_dims *d = &j->d;
  int64_t vec = j->spec.vl * d->esz, bytes = d->batches * d->m * d->nn * d->esz;
  j->stream = !scratch_c && j->pk == 1 && d->k <= j->blk.kc && (d->nn * d->esz) % vec == 0 &&
              (uintptr_t)j->c % (uintptr_t)vec == 0 && bytes >= graph_env_once(&limit, read_gemm_stream_bytes);
}

/* C += each part's partial sums, part after part (the same order for
 * every element, whatever ran where). */
static void sum_partials(const gemm_job *j) {
  int64_t n = j->d.batches * j->d.m * j->d.nn;
  for (int64_t ik = 1; ik < j->pk; ik++) {
    if (j->d.esz == 4) {
      float *c = (float *)j->c;
      const float *p = (const float *)j->partial + (ik - 1) * n;
      for (int64_t e = 0; e < n; e++) c[e] += p[e];
    } else {
      double *c = (double *)j->c;
      const double *p = (const double *)j->partial + (ik - 1) * n;
      for (int64_t e = 0; e < n; e++) c[e] += p[e];
    }
  }
}

static _Thread_local int last_threads = 1, last_k_parts = 1;
static _Thread_local bool last_streamed;
static _Thread_local int64_t last_compile_ns, last_load_ns;

int rt_gemm_last_threads(void) { return last_threads; }

int rt_gemm_last_k_parts(void) { return last_k_parts; }

bool rt_gemm_last_streamed(void) { return last_streamed; }

int64_t rt_gemm_last_compile_ns(void) { return last_compile_ns; }

int64_t rt_gemm_last_load_ns(void) { return last_load_ns; }

/* The micro-kernel for the job's spec; when this call compiled it, its
 * time goes to last_compile_ns and, while profiling, a compile event
 * named after the variant; when it loaded it from the disk cache, its
 * time goes to last_load_ns. */
static int get_kernel(gemm_job *j, char *err, size_t errlen) {
  llvm_gemm_got got;
  int64_t t0 = rt_now_ns();
  int st = llvm_gemm_kernel(&j->spec, rt_disk_gemm, &j->ukr, &got, err, errlen);
  if (st != KILN_OK || got == LLVM_GEMM_HELD) return st;
  int64_t t1 = rt_now_ns();
  if (got == LLVM_GEMM_LOADED) {
    last_load_ns = t1 > t0 ? t1 - t0 : 1;
    return st;
  }
  last_compile_ns = t1 - t0;
  if (rt_profiling()) {
    char name[64];
    snprintf(name, sizeof name, "gemm_ukr_%s_%dx%d", j->spec.dtype == KILN_F64 ? "f64" : "f32", j->spec.mr,
             j->spec.nr);
    rt_profile_compile(name, t0, t1);
  }
  return st;
}

/* Operand i of n: its view of in[i], or its split over the input of the
 * pending reshape copy it reads through (in[i] is that input's data). */
static gemm_operand operand_of(gemm_job *j, const graph_node *n, int i, const void *data) {
  const graph_view *v = &n->inputs[i].view;
  int nd = v->ndim, esz = j->d.esz;
  if (data && data == rt_gemm_copy_source(n, i, &j->split[i]))
    return (gemm_operand){.base = (const char *)data + j->split[i].offset * esz, .view = v, .split = &j->split[i],
                          .rdim = nd - 2, .cdim = nd - 1};
  return (gemm_operand){.base = (const char *)data + v->offset * esz, .view = v, .rs = v->strides[nd - 2],
                        .cs = v->strides[nd - 1], .rdim = nd - 2, .cdim = nd - 1};
}

static gemm_operand transposed(gemm_operand op) {
  int64_t rs = op.rs;
  int rdim = op.rdim;
  op.rs = op.cs, op.cs = rs;
  op.rdim = op.cdim, op.cdim = rdim;
  return op;
}

/* A skinny product whose whole MR×NR tiles would hold at least a third
 * more multiply-adds than the product's transpose needs (N fills few of
 * the NR lanes) is computed as Cᵀ = Bᵀ·Aᵀ: the operands swap and
 * transpose (a strided view's strides, a split's dims), and Cᵀ goes to
 * scratch, transposed into C after (M·N elements). A convolution's weight
 * gradient with few input channels is one: 32×9×100352 for fashion_cnn's
 * first layer (14×32 tiles: 1,344 against 448 lanes; 6×16: 576 against
 * 384). */
static bool swap_pays(const gemm_job *j) {
  int64_t mr = j->spec.mr, nr = j->spec.nr, m = j->d.m, n = j->d.nn;
  return 4 * round_up(n, mr) * round_up(m, nr) <= 3 * round_up(m, mr) * round_up(n, nr);
}

/* c [batches, m, nn] = ct [batches, nn, m] transposed. */
static void untranspose(char *c, const char *ct, const mm_dims *d) {
  int esz = d->esz;
  for (int64_t i = 0; i < d->batches; i++) {
    char *cb = c + i * d->m * d->nn * esz;
    const char *tb = ct + i * d->m * d->nn * esz;
    for (int64_t r = 0; r < d->m; r++)
      for (int64_t q = 0; q < d->nn; q++) memcpy(cb + (r * d->nn + q) * esz, tb + (q * d->m + r) * esz, (size_t)esz);
  }
}

/* The job's micro-kernel spec: the target's for its M rows
 * (llvm_gemm_choose_rows), with epi's steps. */
static int choose_spec(gemm_job *j, kiln_dtype dtype, char *err, size_t errlen) {
  int st = llvm_gemm_choose_rows(dtype, j->d.m, &j->spec, err, errlen);
  if (st != KILN_OK || !j->epi) return st;
  j->spec.n_epi = j->epi->n;
  memcpy(j->spec.epi, j->epi->step, sizeof j->spec.epi[0] * (size_t)j->epi->n);
  return KILN_OK;
}

int rt_gemm_matmul(const graph_node *n, const void *const *in, graph_buffer *out, char *err, size_t errlen) {
  return rt_gemm_matmul_epi(n, in, NULL, out, err, errlen);
}

int rt_gemm_matmul_epi(const graph_node *n, const void *const *in, const rt_gemm_epi *epi, graph_buffer *out,
                       char *err, size_t errlen) {
  gemm_job j = {.d = mm_dims_of(n), .c = out->data, .epi = epi && (epi->n > 0 || epi->after) ? epi : NULL};
  last_threads = last_k_parts = 1;
  last_streamed = false;
  last_compile_ns = last_load_ns = 0;
  if (j.epi && (j.d.k == 0 || epi->n > LLVM_GEMM_EPI_MAX || epi->nb != j.d.nb || (epi->after && j.d.nb > 0))) {
    snprintf(err, errlen, "rt_gemm_matmul_epi: an epilogue needs K > 0 and the product's batch dims (an after hook: none)");
    return KILN_ERR_ARG;
  }
  if (j.d.k == 0) {
    memset(out->data, 0, (size_t)(n->numel * j.d.esz));
    return KILN_OK;
  }
  if (j.d.m == 0 || j.d.nn == 0 || j.d.batches == 0) return KILN_OK;
  int st = choose_spec(&j, n->dtype, err, errlen);
  if (st != KILN_OK) return st;
  j.a = operand_of(&j, n, 0, in[0]);
  j.b = operand_of(&j, n, 1, in[1]);
  graph_buffer *ct = NULL; /* Cᵀ of a swapped product */
  if (!j.epi && swap_pays(&j)) { /* an epilogue is applied to C itself, never to Cᵀ */
    ct = graph_buffer_alloc(n->numel * j.d.esz);
    if (!ct) {
      snprintf(err, errlen, "out of memory allocating the generated GEMM's transposed result");
      return KILN_ERR_OOM;
    }
    gemm_operand a = j.a;
    j.a = transposed(j.b), j.b = transposed(a);
    int64_t m = j.d.m;
    j.d.m = j.d.nn, j.d.nn = m;
    j.c = ct->data;
    st = choose_spec(&j, n->dtype, err, errlen); /* MR for the new M */
  }
  if (st == KILN_OK) st = get_kernel(&j, err, errlen);
  if (st != KILN_OK) {
    graph_buffer_release(ct);
    return st;
  }
  j.blk = rt_gemm_blocking_for(j.spec.mr, j.spec.nr, j.d.esz);
  atomic_init(&j.oom, false);
  plan_k_parts(&j);
  last_k_parts = (int)j.pk;
  graph_buffer *partial = NULL;
  if (j.pk > 1) {
    partial = graph_buffer_alloc((j.pk - 1) * j.d.batches * j.d.m * j.d.nn * j.d.esz);
    if (!partial) {
      graph_buffer_release(ct);
      snprintf(err, errlen, "out of memory allocating the generated GEMM's partial sums");
      return KILN_ERR_OOM;
    }
    j.partial = partial->data;
  }
  plan_parts(&j, rt_pool_threads());
  plan_prefetch(&j);
  plan_stream(&j, ct != NULL);
  last_streamed = j.stream;
  int64_t items = j.d.batches * j.pm * j.pn * j.pk;
  /* cost: multiply-adds / 16 per item, as blas.c gives it */
  double macs = (double)j.d.m * (double)j.d.nn * (double)j.d.k * (double)j.d.batches / (double)items / 16.0;
  int64_t cost = macs > 1e15 ? INT64_C(1000000000000000) : (int64_t)macs + 1;
  void *bufs[1] = {&j};
  last_threads = rt_pool_run(gemm_chunk, bufs, items, cost);
  if (partial && !atomic_load(&j.oom)) sum_partials(&j);
  graph_buffer_release(partial);
  if (ct) {
    mm_dims d = j.d;
    d.m = j.d.nn, d.nn = j.d.m;
    if (!atomic_load(&j.oom)) untranspose(out->data, ct->data, &d);
    graph_buffer_release(ct);
  }
  if (!atomic_load(&j.oom)) return KILN_OK;
  snprintf(err, errlen, "out of memory allocating the generated GEMM's packing buffers");
  return KILN_ERR_OOM;
}

/* ------------------------------------- single-threaded block products */

int rt_gemm_block_init(rt_gemm_block *g, kiln_dtype dtype, char *err, size_t errlen) {
  gemm_job j = {.d = {.esz = graph_dtypes[dtype].size}};
  int st = choose_spec(&j, dtype, err, errlen);
  if (st == KILN_OK) st = get_kernel(&j, err, errlen);
  if (st != KILN_OK) return st;
  *g = (rt_gemm_block){.spec = j.spec, .ukr = j.ukr, .esz = j.d.esz};
  return KILN_OK;
}

void rt_gemm_block_pack_a(const rt_gemm_block *g, void *dst, const void *src, int64_t rs, int64_t cs, int64_t m,
                          int64_t k) {
  pack_a(dst, src, rs, cs, m, k, g->spec.mr, g->esz);
}

void rt_gemm_block_pack_b(const rt_gemm_block *g, void *dst, const void *src, int64_t rs, int64_t cs, int64_t k,
                          int64_t n) {
  pack_b(dst, src, rs, cs, k, n, g->spec.nr, g->esz);
}

void rt_gemm_block_panels(const rt_gemm_block *g, int64_t m, int64_t n, int64_t k, const void *a, int64_t as,
                          const void *b, int64_t bs, void *c, int64_t ldc, bool acc) {
  gemm_job j = {.d = {.esz = g->esz, .nn = ldc}, .spec = g->spec, .ukr = g->ukr};
  int64_t mr = g->spec.mr, nr = g->spec.nr, esz = g->esz, flags = (acc ? LLVM_GEMM_ACCUMULATE : 0) | LLVM_GEMM_LAST;
  for (int64_t jr = 0; jr < n; jr += nr) {
    const char *bp = (const char *)b + jr / nr * bs * esz;
    int64_t cols = min64(nr, n - jr);
    for (int64_t ir = 0; ir < m; ir += mr) {
      const char *ap = (const char *)a + ir / mr * as * esz;
      char *ct = (char *)c + (ir * ldc + jr) * esz;
      int64_t rows = min64(mr, m - ir);
      if (rows == mr && cols == nr) g->ukr(k, ap, bp, ct, ldc, flags, NULL);
      else edge_tile(&j, k, ap, bp, ct, rows, cols, flags, NULL, 0, 0);
    }
  }
}
