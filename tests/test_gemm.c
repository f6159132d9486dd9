/*
 * test_gemm.c — the generated GEMM (runtime/gemm.c, codegen_llvm/
 * llvm_gemm.c) forced for every product (rt_gemm_set_mode(1), as
 * KILN_GEMM=jit): values against a double-precision reference computed
 * here from the operands' own elements, for shapes with M, N, K of 0, 1,
 * primes and sizes that are not multiples of MR, NR or any cache block,
 * a K that crosses KC, sizes crossing MC and NC (with small blocks), every
 * operand layout (contiguous, transposed, narrowed with a step, a
 * transposed step, an overlapping as_strided window, broadcast batches
 * of stride 0), batched products, F32 and F64; each micro-kernel variant
 * (the 512-bit one, an AVX2-width one, the 128-bit fallback, odd MR×NR);
 * results equal for 1, 2 and 3 threads (a split along K too); the profile names the kernel
 * and counts the micro-kernel's compile at its first use;
 * out of memory while packing is an error that loses nothing.
 *
 * The bound (docs/internals.md, "The generated GEMM"): each element of
 * C differs from the exact product of the operands' values by at most
 * 2·K·ε·Σ_k |a_ik·b_kj| (ε the dtype's machine epsilon), which covers the
 * K roundings of a sum of fused multiply-adds (γ_K = K·ε/2 / (1 − K·ε/2)
 * per Higham, Accuracy and Stability, §3.1) with a factor of 4 to spare
 * and the reference's own F64 rounding.
 */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "fault.h"
#include "kiln/kiln.h"
#include "llvm_backend.h"
#include "rt_internal.h"
#include "test_util.h"

/* ------------------------------------------------------------ operands */

static uint64_t rng = 0x9E3779B97F4A7C15u;

/* A value in [-1, 1) (xorshift; deterministic). */
static double next_value(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (double)(rng >> 11) / (double)(UINT64_C(1) << 52) - 1.0;
}

/* A new 1-D tensor of dt with n random values. */
static kiln_tensor *random_storage(kiln_dtype dt, int64_t n) {
  double *v = test_malloc(sizeof *v * (size_t)(n > 0 ? n : 1));
  for (int64_t i = 0; i < n; i++) v[i] = next_value();
  kiln_tensor *t = kiln_to_dtype(kiln_from_data(KILN_F64, 1, (int64_t[]){n}, v), dt);
  test_free(v);
  assert_int_equal(kiln_realize(t), KILN_OK);
  return t;
}

/* How an operand matrix [rows, cols] is laid out in its storage. */
typedef enum layout {
  CONTIG,   /* row-major */
  TRANS,    /* the transpose of a row-major [cols, rows] */
  STEP,     /* rows of a wider matrix, every other column, one row and column in */
  TSTEP,    /* strides [2, 2·rows + 1]: neither stride 1 */
  HANKEL,   /* as_strided, strides [1, 1]: (r, c) is element r + c (overlapping) */
  N_LAYOUTS
} layout;

static const char *layout_names[] = {"contig", "trans", "step", "tstep", "hankel"};

/* A [rows, cols] operand of dt laid out as lay (scope-owned). */
static kiln_tensor *operand(kiln_dtype dt, int64_t rows, int64_t cols, layout lay) {
  int64_t sz[2] = {rows, cols};
  switch (lay) {
  case CONTIG:
    return kiln_view(random_storage(dt, rows * cols), 2, sz);
  case TRANS:
    return kiln_t(kiln_view(random_storage(dt, rows * cols), 2, (int64_t[]){cols, rows}));
  case STEP: {
    int64_t w = 2 * cols + 3;
    return kiln_as_strided(random_storage(dt, (rows + 2) * w), 2, sz, (int64_t[]){w, 2}, w + 1);
  }
  case TSTEP:
    return kiln_as_strided(random_storage(dt, 2 * rows * cols + 2 * rows + cols + 2), 2, sz,
                           (int64_t[]){2, 2 * rows + 1}, 1);
  default:
    return kiln_as_strided(random_storage(dt, rows + cols + 1), 2, sz, (int64_t[]){1, 1}, 0);
  }
}

/* t's values as F64, row-major (test_malloc'ed). */
static double *values_of(kiln_tensor *t) {
  int64_t n = kiln_numel(t);
  double *v = test_malloc(sizeof *v * (size_t)(n > 0 ? n : 1));
  kiln_scope_begin();
  assert_int_equal(kiln_read(kiln_to_dtype(t, KILN_F64), v, sizeof *v * (size_t)n), KILN_OK);
  kiln_scope_end();
  return v;
}

/* ------------------------------------------------------------- checks */

/* c [batches, m, n] against a [batches, m, k] · b [batches, k, n] (values
 * row-major), within the bound of the file comment. */
static void expect_product(const double *a, const double *b, const double *c, int64_t batches, int64_t m, int64_t n,
                           int64_t k, kiln_dtype dt, const char *what) {
  double eps = dt == KILN_F64 ? DBL_EPSILON : FLT_EPSILON;
  for (int64_t i = 0; i < batches; i++)
    for (int64_t r = 0; r < m; r++)
      for (int64_t col = 0; col < n; col++) {
        double want = 0, mag = 0;
        for (int64_t p = 0; p < k; p++) {
          double x = a[(i * m + r) * k + p] * b[(i * k + p) * n + col];
          want += x;
          mag += fabs(x);
        }
        double got = c[(i * m + r) * n + col], bound = 2.0 * (double)k * eps * mag + DBL_MIN;
        if (!(fabs(got - want) <= bound))
          fail_msg("%s: c[%lld, %lld, %lld] = %.17g, want %.17g (bound %.3g)", what, (long long)i, (long long)r,
                   (long long)col, got, want, bound);
      }
}

/* The product a · b, forced with profiling on: its one record must be the
 * generated GEMM's (gemm_..., backend llvm). Returns c's values. */
static double *jit_product(kiln_tensor *a, kiln_tensor *b, kiln_tensor **out) {
  kiln_profile_begin();
  kiln_tensor *c = kiln_matmul(a, b);
  assert_non_null(c);
  assert_int_equal(kiln_realize(c), KILN_OK);
  kiln_profile_end();
  kiln_kernel_record r;
  bool seen = false;
  for (int i = 0; i < kiln_profile_count(); i++) {
    assert_int_equal(kiln_profile_get(i, &r), KILN_OK);
    if (strstr(r.name, "gemm")) {
      assert_true(strncmp(r.name, "gemm_", 5) == 0);
      assert_string_equal(r.backend, "llvm");
      seen = true;
    }
  }
  if (kiln_numel(c) > 0 && !seen) fail_msg("the product did not run the generated GEMM");
  if (out) *out = c;
  return values_of(c);
}

/* One 2-D product M×N×K of dt with operand layouts la, lb, checked. */
static void check_2d(kiln_dtype dt, int64_t m, int64_t n, int64_t k, layout la, layout lb) {
  kiln_scope_begin();
  kiln_tensor *a = operand(dt, m, k, la), *b = operand(dt, k, n, lb);
  double *va = values_of(a), *vb = values_of(b), *vc = jit_product(a, b, NULL);
  char what[96];
  snprintf(what, sizeof what, "%lldx%lldx%lld %s %s·%s", (long long)m, (long long)n, (long long)k,
           dt == KILN_F64 ? "F64" : "F32", layout_names[la], layout_names[lb]);
  expect_product(va, vb, vc, 1, m, n, k, dt, what);
  test_free(va), test_free(vb), test_free(vc);
  kiln_scope_end();
  expect_no_error();
}

static int default_threads = 1; /* the pool's threads when the program started */

static int setup_jit(void **state) {
  rt_gemm_set_mode(1);
  return 0;
}

static int teardown_jit(void **state) {
  rt_gemm_set_mode(-1);
  llvm_gemm_override(0, 0, 0, 0);
  rt_gemm_set_blocking(0, 0, 0);
  kiln_set_num_threads(default_threads);
  return 0;
}

/* --------------------------------------------------------------- tests */

static const int64_t small_sizes[] = {0, 1, 7, 13, 31, 97};

/* Every combination of the small sizes, contiguous, F32 and F64. */
static void small_shapes(void **state) {
  int ns = (int)(sizeof small_sizes / sizeof *small_sizes);
  for (int d = 0; d < 2; d++)
    for (int i = 0; i < ns; i++)
      for (int j = 0; j < ns; j++)
        for (int l = 0; l < ns; l++)
          check_2d(d ? KILN_F64 : KILN_F32, small_sizes[i], small_sizes[j], small_sizes[l], CONTIG, CONTIG);
}

/* Every pair of layouts on ragged shapes. */
static void layouts(void **state) {
  for (int d = 0; d < 2; d++)
    for (int la = 0; la < N_LAYOUTS; la++)
      for (int lb = 0; lb < N_LAYOUTS; lb++) {
        check_2d(d ? KILN_F64 : KILN_F32, 37, 45, 29, (layout)la, (layout)lb);
        check_2d(d ? KILN_F64 : KILN_F32, 1, 33, 17, (layout)la, (layout)lb);
      }
}

/* A long K (several KC blocks: beta 1 into whole and edge tiles), and
 * sizes past the default MC and NC with the host's blocking. */
static void large_blocks(void **state) {
  check_2d(KILN_F32, 61, 83, 2000, CONTIG, TRANS);
  check_2d(KILN_F64, 33, 50, 2000, TRANS, CONTIG);
  check_2d(KILN_F32, 700, 40, 64, CONTIG, CONTIG);  /* M past MC (672 at 48 KiB L1, 1 MiB L2) */
  check_2d(KILN_F32, 17, 4200, 20, CONTIG, STEP);   /* N past NC (at most 4,096) */
  /* a wide B streamed block after block (one A block, K within KC, a
   * part's B past any L2: plan_prefetch's NC cut and prefetches, A
   * packed once for all blocks) */
  check_2d(KILN_F32, 40, 12001, 300, CONTIG, CONTIG);
  check_2d(KILN_F64, 24, 9001, 200, CONTIG, CONTIG);
}

/* Small blocks (MC 28, KC 16, NC 64) so that every loop runs several
 * blocks, ragged ones last, on modest sizes. */
static void small_blocks(void **state) {
  rt_gemm_set_blocking(28, 16, 64);
  for (int d = 0; d < 2; d++) {
    check_2d(d ? KILN_F64 : KILN_F32, 101, 157, 53, CONTIG, CONTIG);
    check_2d(d ? KILN_F64 : KILN_F32, 97, 131, 47, TRANS, TSTEP);
    check_2d(d ? KILN_F64 : KILN_F32, 29, 65, 17, HANKEL, TRANS);
  }
  rt_gemm_set_blocking(0, 0, 0);
}

/* Batched products: a batch of A against one broadcast B (stride 0),
 * broadcast against each other ([3, 1] × [1, 2] batches), and bmm of
 * transposed batch slices. */
static void batched(void **state) {
  for (int d = 0; d < 2; d++) {
    kiln_dtype dt = d ? KILN_F64 : KILN_F32;
    kiln_scope_begin();
    int64_t m = 19, n = 35, k = 23;
    kiln_tensor *a = kiln_view(random_storage(dt, 3 * m * k), 4, (int64_t[]){3, 1, m, k});
    kiln_tensor *b = kiln_transpose(kiln_view(random_storage(dt, 2 * n * k), 4, (int64_t[]){1, 2, n, k}), 2, 3);
    kiln_tensor *c;
    double *vc = jit_product(a, b, &c);
    assert_int_equal(kiln_size(c, 0), 3);
    assert_int_equal(kiln_size(c, 1), 2);
    /* the reference over the broadcast operands, made contiguous */
    kiln_tensor *ea = kiln_expand(a, 4, (int64_t[]){3, 2, m, k}), *eb = kiln_expand(b, 4, (int64_t[]){3, 2, k, n});
    double *va = values_of(ea), *vb = values_of(eb);
    expect_product(va, vb, vc, 6, m, n, k, dt, "broadcast batches");
    test_free(va), test_free(vb), test_free(vc);
    /* one B for every batch of A: B's batch stride is 0 */
    kiln_tensor *a3 = kiln_view(random_storage(dt, 4 * m * k), 3, (int64_t[]){4, m, k});
    kiln_tensor *b2 = operand(dt, k, n, STEP);
    vc = jit_product(a3, b2, NULL);
    va = values_of(a3), vb = values_of(kiln_expand(b2, 3, (int64_t[]){4, k, n}));
    expect_product(va, vb, vc, 4, m, n, k, dt, "B broadcast over batches");
    test_free(va), test_free(vb), test_free(vc);
    kiln_scope_end();
    expect_no_error();
  }
}

/* The public entry points that record MATMUL: mm, bmm, addmm, linear. */
static void entry_points(void **state) {
  kiln_scope_begin();
  kiln_tensor *x = operand(KILN_F32, 20, 30, CONTIG), *w = operand(KILN_F32, 17, 30, CONTIG);
  kiln_tensor *bias = random_storage(KILN_F32, 17);
  kiln_tensor *ref = kiln_add(kiln_matmul(x, kiln_t(w)), bias); /* through the generated GEMM too */
  double *want = values_of(ref);
  kiln_tensor *outs[3] = {kiln_linear(x, w, bias), kiln_addmm(bias, x, kiln_t(w), 1, 1),
                          kiln_add(kiln_mm(x, kiln_t(w)), bias)};
  for (int i = 0; i < 3; i++) {
    double *got = values_of(outs[i]);
    for (int j = 0; j < 20 * 17; j++) assert_float_equal(got[j], want[j], 1e-5);
    test_free(got);
  }
  kiln_tensor *ba = kiln_view(random_storage(KILN_F32, 2 * 9 * 5), 3, (int64_t[]){2, 9, 5});
  kiln_tensor *bb = kiln_view(random_storage(KILN_F32, 2 * 5 * 11), 3, (int64_t[]){2, 5, 11});
  double *vc = values_of(kiln_bmm(ba, bb)), *va = values_of(ba), *vb = values_of(bb);
  expect_product(va, vb, vc, 2, 9, 11, 5, KILN_F32, "bmm");
  test_free(want), test_free(va), test_free(vb), test_free(vc);
  kiln_scope_end();
  expect_no_error();
}

/* Each micro-kernel variant on this host: 512-bit (14×32 F32), the
 * AVX2 shape (256 bits, 16 registers: 6×16), the 128-bit fallback (6×8),
 * and odd tiles; a width the host lacks is clamped to the host's. */
static void micro_kernel_variants(void **state) {
  static const struct {
    int bits, regs, mr, nv;
  } v[] = {{512, 32, 0, 0}, {256, 16, 0, 0}, {128, 16, 0, 0}, {128, 16, 5, 3}, {256, 16, 1, 1}, {512, 32, 16, 4}};
  for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
    llvm_gemm_override(v[i].bits, v[i].regs, v[i].mr, v[i].nv);
    for (int d = 0; d < 2; d++) {
      kiln_dtype dt = d ? KILN_F64 : KILN_F32;
      llvm_gemm_spec s;
      char err[256];
      assert_int_equal(llvm_gemm_choose(dt, &s, err, sizeof err), KILN_OK);
      assert_true(s.vl * (d ? 64 : 32) <= v[i].bits);
      if (!v[i].mr && s.vl * (d ? 64 : 32) == v[i].bits)
        assert_int_equal(s.mr, v[i].regs == 32 ? 14 : 6); /* the register rule */
      check_2d(dt, 45, 70, 37, CONTIG, TRANS);
      check_2d(dt, 3, 5, 300, STEP, CONTIG);
    }
  }
  llvm_gemm_override(0, 0, 0, 0);
}

/* The measured table (llvm_gemm.c `measured`): on a Zen 4 or Zen 5 JIT
 * target (the host's, or KILN_CPU's) with 512-bit vectors, F32 and F64
 * take 8 rows instead of the register rule's 14; elsewhere the rule. */
static void measured_mr(void **state) {
  (void)state;
  const char *cpu = llvm_target_cpu();
  bool zen = cpu && (!strcmp(cpu, "znver4") || !strcmp(cpu, "znver5"));
  for (int d = 0; d < 2; d++) {
    llvm_gemm_spec s;
    char err[256];
    assert_int_equal(llvm_gemm_choose(d ? KILN_F64 : KILN_F32, &s, err, sizeof err), KILN_OK);
    if (llvm_target_vector_bits() == 512) assert_int_equal(s.mr, zen ? 8 : 14);
  }
}

/* MR for a product's M (llvm_gemm_choose_rows): the register rule's
 * unless a shorter tile with at least 16 accumulators pads the last row
 * tile by more than 2 % fewer rows; products of those M (and a skinny
 * one that runs transposed, whose MR follows its new M) are right. */
static void rows_choose_mr(void **state) {
  (void)state;
  static const struct {
    int bits, regs;
    int64_t m;
    int mr;
  } v[] = {{512, 32, 64, 8},  {512, 32, 128, 8},  {512, 32, 2048, 14}, {512, 32, 784, 14}, {512, 32, 9, 9},
           {512, 32, 288, 12}, {512, 32, 100, 10}, {256, 16, 64, 6},    {256, 16, 9, 6}};
  for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
    llvm_gemm_override(v[i].bits, v[i].regs, 0, 0);
    llvm_gemm_spec s;
    char err[256];
    assert_int_equal(llvm_gemm_choose_rows(KILN_F32, v[i].m, &s, err, sizeof err), KILN_OK);
    if (s.vl * 32 == v[i].bits) assert_int_equal(s.mr, v[i].mr); /* (a narrower host clamps the width) */
  }
  llvm_gemm_override(512, 32, 0, 0);
  for (int d = 0; d < 2; d++) {
    kiln_dtype dt = d ? KILN_F64 : KILN_F32;
    check_2d(dt, 64, 70, 37, CONTIG, TRANS);
    check_2d(dt, 128, 45, 300, TRANS, CONTIG);
    check_2d(dt, 300, 9, 50, CONTIG, CONTIG); /* Cᵀ [9, 300]: MR 9 */
  }
  llvm_gemm_override(0, 0, 0, 0);
}

/* A micro-kernel variant's first product compiles it: that record has
 * cache_hit false and its compile time; the next one is a hit. */
static void first_use_compiles(void **state) {
  llvm_gemm_override(128, 16, 3, 1); /* a variant no other test uses */
  kiln_scope_begin();
  kiln_tensor *a = operand(KILN_F64, 9, 8, CONTIG), *b = operand(KILN_F64, 8, 10, CONTIG);
  kiln_kernel_record r[2];
  for (int i = 0; i < 2; i++) {
    kiln_profile_begin();
    assert_int_equal(kiln_realize(kiln_matmul(a, b)), KILN_OK);
    kiln_profile_end();
    assert_int_equal(kiln_profile_get(kiln_profile_count() - 1, &r[i]), KILN_OK);
    assert_string_equal(r[i].name, "gemm_f64_9x10x8");
  }
  assert_false(r[0].cache_hit);
  assert_true(r[0].compile_ns > 0);
  assert_true(r[1].cache_hit);
  assert_int_equal(r[1].compile_ns, 0);
  kiln_scope_end();
  llvm_gemm_override(0, 0, 0, 0);
  expect_no_error();
}

/* The split over 1, 2 and 3 threads (3: a 1×3 or 3×1 grid of parts)
 * gives bitwise equal results: every element sums its K products in one
 * fixed order. */
static void same_for_any_thread_count(void **state) {
  kiln_scope_begin();
  kiln_tensor *a = operand(KILN_F32, 150, 333, TRANS), *b = operand(KILN_F32, 333, 190, CONTIG);
  double *first = NULL;
  for (int t = 1; t <= 3; t++) {
    assert_int_equal(kiln_set_num_threads(t), KILN_OK);
    double *c = jit_product(a, b, NULL);
    if (!first) first = c;
    else {
      assert_memory_equal(first, c, sizeof *c * 150 * 190);
      test_free(c);
    }
  }
  double *va = values_of(a), *vb = values_of(b);
  expect_product(va, vb, first, 1, 150, 190, 333, KILN_F32, "threads");
  test_free(va), test_free(vb), test_free(first);
  kiln_set_num_threads(default_threads);
  kiln_scope_end();
  expect_no_error();
}

/* A product of one MR×NR tile with a long K (a weight gradient's shape)
 * is cut along K by its shape alone (runtime/gemm.c, plan_k_parts): it
 * runs on two threads when the pool has two, and its K parts are added in
 * one order, so 1, 2 and 3 threads give bitwise equal results, within
 * the bound; F32 and F64, a transposed A as the gradient reads it, and
 * two batches. */
static void k_split_for_few_tiles(void **state) {
  const kiln_dtype dts[] = {KILN_F32, KILN_F64};
  const int64_t m = 5, n = 8, k = 50021;
  for (int d = 0; d < 2; d++) {
    kiln_scope_begin();
    kiln_tensor *a = operand(dts[d], m, k, TRANS), *b = operand(dts[d], k, n, CONTIG);
    double *first = NULL;
    for (int t = 1; t <= 3; t++) {
      assert_int_equal(kiln_set_num_threads(t), KILN_OK);
      double *c = jit_product(a, b, NULL);
      assert_true(rt_gemm_last_k_parts() > 1);
      if (t == 2) assert_int_equal(rt_gemm_last_threads(), 2);
      if (!first) first = c;
      else {
        assert_memory_equal(first, c, sizeof *c * m * n);
        test_free(c);
      }
    }
    double *va = values_of(a), *vb = values_of(b);
    expect_product(va, vb, first, 1, m, n, k, dts[d], "K split");
    test_free(va), test_free(vb), test_free(first);
    /* two batches (two tiles) of A against one B: each batch's parts */
    kiln_tensor *a2 = kiln_view(random_storage(dts[d], 2 * m * k), 3, (int64_t[]){2, m, k});
    double *vc = jit_product(a2, b, NULL);
    va = values_of(a2), vb = values_of(kiln_expand(b, 3, (int64_t[]){2, k, n}));
    expect_product(va, vb, vc, 2, m, n, k, dts[d], "K split, batched");
    test_free(va), test_free(vb), test_free(vc);
    kiln_set_num_threads(default_threads);
    kiln_scope_end();
  }
  expect_no_error();
}

/* A product whose C is stored once and is past KILN_GEMM_STREAM_BYTES
 * (16 MiB) stores its whole tiles streaming (runtime/gemm.c,
 * plan_stream): a convolution's input-gradient columns, 288×25088×64 F32
 * (A read transposed, as Wᵀ), and F64 at 96 rows; the values within the
 * bound either way. A row of C that is no multiple of the vector
 * (N = 25087) and a K past one KC block (KC set to 128) are stored
 * plainly. */
static void streams_large_results(void **state) {
  const struct {
    kiln_dtype dt;
    int64_t m, n, k;
    bool streamed;
  } cases[] = {{KILN_F32, 288, 25088, 64, true},
               {KILN_F64, 96, 25088, 40, true},
               {KILN_F32, 288, 25087, 64, false},
               {KILN_F64, 84, 25088, 400, false}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    rt_gemm_set_blocking(0, i == 3 ? 128 : 0, 0); /* the last: K past one KC block whatever the caches */
    kiln_scope_begin();
    kiln_tensor *a = operand(cases[i].dt, cases[i].m, cases[i].k, TRANS);
    kiln_tensor *b = operand(cases[i].dt, cases[i].k, cases[i].n, CONTIG);
    double *c = jit_product(a, b, NULL);
    if (rt_gemm_last_streamed() != cases[i].streamed) fail_msg("case %zu: streamed %d", i, (int)rt_gemm_last_streamed());
    double *va = values_of(a), *vb = values_of(b);
    expect_product(va, vb, c, 1, cases[i].m, cases[i].n, cases[i].k, cases[i].dt, "streamed C");
    test_free(va), test_free(vb), test_free(c);
    kiln_scope_end();
  }
  rt_gemm_set_blocking(0, 0, 0);
  expect_no_error();
}

/* A one-batch product of many tiles with a K of at least 32 KC blocks
 * whose partial sums are small beside its packing (conv2's weight
 * gradient, 64×288×25088) is cut along K too: 1, 2 and 3 threads give
 * bitwise equal results, within the bound. Two batches of it are not. */
static void k_split_for_long_k(void **state) {
  const int64_t m = 64, n = 96, k = 25000;
  kiln_scope_begin();
  kiln_tensor *a = operand(KILN_F32, m, k, TRANS), *b = operand(KILN_F32, k, n, CONTIG);
  double *first = NULL;
  for (int t = 1; t <= 3; t++) {
    assert_int_equal(kiln_set_num_threads(t), KILN_OK);
    double *c = jit_product(a, b, NULL);
    assert_true(rt_gemm_last_k_parts() > 1);
    if (!first) first = c;
    else {
      assert_memory_equal(first, c, sizeof *c * m * n);
      test_free(c);
    }
  }
  double *va = values_of(a), *vb = values_of(b);
  expect_product(va, vb, first, 1, m, n, k, KILN_F32, "long K split");
  test_free(va), test_free(vb), test_free(first);
  /* two batches of it: the batches spread over the threads, K is not cut */
  kiln_tensor *a2 = kiln_view(random_storage(KILN_F32, 2 * m * k), 3, (int64_t[]){2, m, k});
  double *c2 = jit_product(a2, b, NULL);
  assert_int_equal(rt_gemm_last_k_parts(), 1);
  test_free(c2);
  kiln_set_num_threads(default_threads);
  kiln_scope_end();
  expect_no_error();
}

/* Out of memory for the packing scratch: the force fails with
 * KILN_ERR_OOM, nothing leaks (the output buffer is released), and the
 * same product then succeeds. */
static void oom_while_packing(void **state) {
  kiln_scope_begin();
  kiln_tensor *a = operand(KILN_F32, 40, 50, CONTIG), *b = operand(KILN_F32, 50, 60, CONTIG);
  kiln_set_num_threads(1); /* one chunk: its scratch is the second buffer of the force */
  graph_fault_arm(0);
  kiln_tensor *c = kiln_matmul(a, b);
  assert_int_equal(kiln_realize(c), KILN_OK);
  int64_t buffers = graph_fault_site_count(GRAPH_FAULT_BUFFER);
  assert_true(buffers >= 2); /* the output, then the packing scratch */
  int64_t total = graph_fault_count();
  bool failed = false;
  for (int64_t n = 1; n <= total && !failed; n++) {
    kiln_tensor *d = kiln_matmul(a, b);
    graph_fault_arm(n);
    int st = kiln_realize(d);
    if (graph_fault_fired() == GRAPH_FAULT_BUFFER && st != KILN_OK) {
      assert_int_equal(st, KILN_ERR_OOM);
      failed = strstr(kiln_last_error(), "packing") != NULL;
    }
    kiln_clear_error();
    graph_fault_arm(-1);
  }
  assert_true(failed);
  double *va = values_of(a), *vb = values_of(b), *vc = jit_product(a, b, NULL);
  expect_product(va, vb, vc, 1, 40, 60, 50, KILN_F32, "after OOM");
  test_free(va), test_free(vb), test_free(vc);
  kiln_set_num_threads(default_threads);
  kiln_scope_end();
  expect_no_error();
}

/* The auto rule (runtime/matmul_host.c): small or thin products stay
 * with OpenBLAS, others take the generated GEMM; KILN_GEMM's forced
 * modes override it. */
static void selection(void **state) {
  kiln_scope_begin();
  rt_gemm_set_mode(0);
  kiln_tensor *thin = kiln_matmul(operand(KILN_F32, 4, 16, CONTIG), operand(KILN_F32, 16, 8, CONTIG));
  kiln_tensor *big = kiln_matmul(operand(KILN_F32, 128, 128, CONTIG), operand(KILN_F32, 128, 128, CONTIG));
  kiln_profile_begin();
  assert_int_equal(kiln_realize(thin), KILN_OK);
  assert_int_equal(kiln_realize(big), KILN_OK);
  kiln_profile_end();
  kiln_kernel_record r;
  assert_int_equal(kiln_profile_get(0, &r), KILN_OK);
  assert_string_equal(r.name, "blas_sgemm_4x8x16");
  assert_int_equal(kiln_profile_get(1, &r), KILN_OK);
  assert_string_equal(r.name, "gemm_128x128x128");
  rt_gemm_set_mode(2);
  kiln_profile_begin();
  assert_int_equal(kiln_realize(kiln_matmul(operand(KILN_F64, 64, 64, CONTIG), operand(KILN_F64, 64, 64, CONTIG))),
                   KILN_OK);
  kiln_profile_end();
  assert_int_equal(kiln_profile_get(kiln_profile_count() - 1, &r), KILN_OK);
  assert_string_equal(r.name, "blas_dgemm_64x64x64");
  rt_gemm_set_mode(1);
  kiln_profile_begin();
  assert_int_equal(kiln_realize(kiln_matmul(operand(KILN_F64, 2, 3, CONTIG), operand(KILN_F64, 3, 4, CONTIG))),
                   KILN_OK);
  kiln_profile_end();
  assert_int_equal(kiln_profile_get(kiln_profile_count() - 1, &r), KILN_OK);
  assert_string_equal(r.name, "gemm_f64_2x4x3");
  kiln_scope_end();
  expect_no_error();
}

int main(void) {
  default_threads = rt_pool_threads();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(small_shapes, setup_jit, teardown_jit),
      cmocka_unit_test_setup_teardown(layouts, setup_jit, teardown_jit),
      cmocka_unit_test_setup_teardown(large_blocks, setup_jit, teardown_jit),
      cmocka_unit_test_setup_teardown(small_blocks, setup_jit, teardown_jit),
      cmocka_unit_test_setup_teardown(batched, setup_jit, teardown_jit),
      cmocka_unit_test_setup_teardown(entry_points, setup_jit, teardown_jit),
      cmocka_unit_test_setup_teardown(micro_kernel_variants, setup_jit, teardown_jit),
      cmocka_unit_test_setup_teardown(rows_choose_mr, setup_jit, teardown_jit),
      cmocka_unit_test_setup_teardown(measured_mr, setup_jit, teardown_jit),
      cmocka_unit_test_setup_teardown(first_use_compiles, setup_jit, teardown_jit),
      cmocka_unit_test_setup_teardown(same_for_any_thread_count, setup_jit, teardown_jit),
      cmocka_unit_test_setup_teardown(k_split_for_few_tiles, setup_jit, teardown_jit),
      cmocka_unit_test_setup_teardown(k_split_for_long_k, setup_jit, teardown_jit),
      cmocka_unit_test_setup_teardown(streams_large_results, setup_jit, teardown_jit),
      cmocka_unit_test_setup_teardown(oom_while_packing, setup_jit, teardown_jit),
      cmocka_unit_test_setup_teardown(selection, setup_jit, teardown_jit),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
