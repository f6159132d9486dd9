/*
 * test_cuda_codegen.c — the CUDA backend's first increment: the printer
 * (kernel IR → CUDA C), NVRTC loaded with dlopen, and the check that the
 * CUDA toolchain accepts every kernel the CPU runtime compiles.
 *
 * The workload test turns the runtime's CUDA check on (rt_set_cuda_check)
 * and runs representative workloads on the CPU: elementwise chains with
 * broadcasting, every unary and binary op of graph/ops.def on every dtype
 * that accepts it, casts between all dtypes, reductions (sum, prod, max,
 * min, argmax, row softmax, layer norm), writes through views and
 * transposed reads, optimizer updates (one kernel writing the parameter
 * and its state in place). Each distinct kernel is compiled by NVRTC for sm_80
 * (CUBIN) and compute_90 (PTX, then ptxas for sm_90); the test asserts
 * that none failed. Without NVRTC those tests skip, unless CI is set and
 * /usr/local/cuda exists or KILN_TEST_EXPECT_DEVICE=1 (then they must
 * run). The printer and the
 * fallback when NVRTC is missing are tested everywhere.
 */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "cuda_backend.h"
#include "cuda_flat_kernel.h"
#include "cuda_test_util.h"
#include "kiln/kiln.h"
#include "rt_internal.h"
#include "test_util.h"

/* Skips the calling test when NVRTC cannot be loaded, except in CI on a
 * machine with the toolkit, or under KILN_TEST_EXPECT_DEVICE=1
 * (cuda_test_util.h), where that is a failure. */
static void need_nvrtc(void) {
  char why[1024];
  if (cuda_nvrtc_available(why, sizeof why)) return;
  if (getenv("CI") && access("/usr/local/cuda", F_OK) == 0) fail_msg("CI with /usr/local/cuda, but %s", why);
  skip_without_device(why);
}

/* ------------------------------------------------------------- printer */

/* out[i] = (f16) max(a[i] (bf16), b[i] (f32)) + (bool) c[i], i < n. */
static void build_mixed(kir_kernel *k, int64_t n) {
  kir_init(k, "mixed-types 1");
  int out = kir_param(k, KIR_F16, true);
  int a = kir_param(k, KIR_BF16, false);
  int b = kir_param(k, KIR_F32, false);
  int c = kir_param(k, KIR_BOOL, false);
  int i = kir_range(k, n, true);
  int x = kir_cast(k, KIR_F32, kir_load(k, a, i));
  int m = kir_alu(k, KIR_MAX, KIR_F32, x, kir_load(k, b, i), -1);
  int s = kir_alu(k, KIR_ADD, KIR_F32, m, kir_cast(k, KIR_F32, kir_load(k, c, i)), -1);
  kir_store(k, out, i, kir_cast(k, KIR_F16, s));
  kir_end(k, i);
}

/* out[0] = sum of (a[i] / 3) % a[i] (a i32) over i < n: the accumulator
 * crosses the parallel range, so the kernel is not splittable. */
static void build_total(kir_kernel *k, int64_t n) {
  kir_init(k, "total");
  int out = kir_param(k, KIR_I64, true);
  int a = kir_param(k, KIR_I32, false);
  int acc = kir_acc(k, KIR_I64, kir_const_i(k, KIR_I64, 0));
  int i = kir_range(k, n, true);
  int x = kir_cast(k, KIR_I64, kir_load(k, a, i));
  int v = kir_alu(k, KIR_DIV, KIR_I64, x, kir_const_i(k, KIR_I64, 3), -1); /* a constant divisor: plain / */
  v = kir_alu(k, KIR_MOD, KIR_I64, v, x, -1);                               /* may be 0 or -1: guarded */
  kir_acc_set(k, acc, kir_alu(k, KIR_ADD, KIR_I64, acc, v, -1));
  kir_end(k, i);
  kir_store(k, out, kir_const_i(k, KIR_INDEX, 0), acc);
}

static void printer_output(void **state) {
  (void)state;
  kir_kernel k;
  char *src = NULL, err[512];
  build_mixed(&k, 100);
  assert_int_equal(cuda_print_kernel(&k, NULL, &src, err, sizeof err), KILN_OK);
  assert_true(cuda_kernel_splittable(&k));
  assert_non_null(strstr(src, "extern \"C\" __global__ void mixed_types_1(__half *p0, const __nv_bfloat16 *p1, "
                              "const float *p2, const unsigned char *p3, long long start, long long end)"));
  assert_non_null(strstr(src, "#include <cuda_fp16.h>"));
  assert_non_null(strstr(src, "#include <cuda_bf16.h>"));
  assert_non_null(strstr(src, "gridDim.x * blockDim.x")); /* grid-stride loop */
  assert_non_null(strstr(src, "kiln_fmax("));             /* NaN-propagating max */
  assert_non_null(strstr(src, "__float2half_rn("));       /* F16 store rounds to nearest even */
  assert_null(strstr(src, "if (blockIdx.x != 0"));
  free(src);
  kir_free(&k);

  build_total(&k, 50);
  assert_int_equal(cuda_print_kernel(&k, "custom name!", &src, err, sizeof err), KILN_OK);
  assert_false(cuda_kernel_splittable(&k));
  assert_non_null(strstr(src, "void custom_name_("));
  assert_null(strstr(src, "cuda_fp16.h")); /* headers only when used */
  assert_null(strstr(src, "cuda_bf16.h"));
  assert_non_null(strstr(src, "if (blockIdx.x != 0 || threadIdx.x != 0) return;"));
  assert_non_null(strstr(src, "kiln_imod<long long>("));
  assert_null(strstr(src, "kiln_idiv<"));
  free(src);
  kir_free(&k);
}

/* out[r] = sum over j < len of in[r * len + j] (F32 in, F64 accumulator),
 * r < rows; rows 0: no parallel range, one output (a whole-tensor sum
 * over two nested loops [3, len]). */
static void build_row_sum(kir_kernel *k, int64_t rows, int64_t len) {
  kir_init(k, "row sum");
  int out = kir_param(k, KIR_F32, true), in = kir_param(k, KIR_F32, false);
  int r = rows ? kir_range(k, rows, true) : -1;
  int acc = kir_acc(k, KIR_F64, kir_const_f(k, KIR_F64, 0));
  int outer = rows ? r : kir_range(k, 3, false);
  int j = kir_range(k, len, false);
  int idx = kir_alu(k, KIR_ADD, KIR_INDEX, kir_alu(k, KIR_MUL, KIR_INDEX, outer, kir_const_i(k, KIR_INDEX, len), -1), j, -1);
  int u = kir_alu(k, KIR_ADD, KIR_F64, acc, kir_cast(k, KIR_F64, kir_load(k, in, idx)), -1);
  kir_set_reassoc(k, u);
  kir_acc_set(k, acc, u);
  kir_end(k, j);
  if (!rows) kir_end(k, outer);
  kir_store(k, out, rows ? r : kir_const_i(k, KIR_INDEX, 0), kir_cast(k, KIR_F32, acc));
  if (rows) kir_end(k, r);
}

/* out[r] = index of the first maximum of row r, the compare-and-select
 * update of passes/lower.c; with nan_first, the first NaN wins (as the
 * lowering prints it for floats). Without it a float argmax is not a form
 * the cooperative plan knows. */
static void build_argmax(kir_kernel *k, int64_t rows, int64_t len, bool nan_first) {
  kir_init(k, "argmax");
  int out = kir_param(k, KIR_I64, true), in = kir_param(k, KIR_F32, false);
  int r = kir_range(k, rows, true);
  int best = kir_acc(k, KIR_F32, kir_const_f(k, KIR_F32, -INFINITY));
  int at = kir_acc(k, KIR_I64, kir_const_i(k, KIR_I64, 0));
  int j = kir_range(k, len, false);
  int idx = kir_alu(k, KIR_ADD, KIR_INDEX, kir_alu(k, KIR_MUL, KIR_INDEX, r, kir_const_i(k, KIR_INDEX, len), -1), j, -1);
  int x = kir_load(k, in, idx);
  int better = kir_alu(k, KIR_CMPLT, KIR_BOOL, best, x, -1);
  if (nan_first) {
    int eq = kir_alu(k, KIR_CMPEQ, KIR_BOOL, best, best, -1), ne = kir_alu(k, KIR_CMPNE, KIR_BOOL, x, x, -1);
    better = kir_alu(k, KIR_OR, KIR_BOOL, better, kir_alu(k, KIR_AND, KIR_BOOL, ne, eq, -1), -1);
  }
  kir_acc_set(k, at, kir_alu(k, KIR_WHERE, KIR_I64, better, kir_cast(k, KIR_I64, j), at));
  kir_acc_set(k, best, kir_alu(k, KIR_WHERE, KIR_F32, better, x, best));
  kir_end(k, j);
  kir_store(k, out, r, at);
  kir_end(k, r);
}

static void expect_shape(const kir_kernel *k, int64_t start, int64_t end, cuda_launch_kind kind, unsigned grid,
                         unsigned block) {
  cuda_launch_rule rule;
  cuda_launch_shape s;
  assert_int_equal(cuda_kernel_launch_rule(k, &rule), KILN_OK);
  assert_int_equal(rule.kind, kind);
  assert_int_equal(cuda_kernel_launch_shape(k, start, end, &s), KILN_OK);
  assert_int_equal(s.grid, grid);
  assert_int_equal(s.block, block);
  assert_int_equal(s.shared_bytes, 0);
}

/* Row reductions print the cooperative form (strided loop, warp shuffles,
 * shared memory, thread-0 store); the launch shapes are the documented
 * ones (cuda_backend.h). */
static void cooperative_form_and_launch_shape(void **state) {
  (void)state;
  kir_kernel k;
  char *src = NULL, err[512];
  build_row_sum(&k, 5, 1000);
  assert_int_equal(cuda_print_kernel(&k, NULL, &src, err, sizeof err), KILN_OK);
  assert_non_null(strstr(src, "__shfl_down_sync(0xffffffffu"));
  assert_non_null(strstr(src, "__shared__ long long kiln_smem[32]"));
  assert_non_null(strstr(src, "__syncthreads()"));
  assert_non_null(strstr(src, "v2 += gridDim.x) { /* one block each */"));
  assert_non_null(strstr(src, "v5_f = threadIdx.x; v5_f < 1000LL; v5_f += blockDim.x"));
  assert_non_null(strstr(src, "if (threadIdx.x != 0) v4 = -0.0;")); /* the initial value is added once */
  assert_non_null(strstr(src, "v4 = kiln_block_reduce(v4, [](double a, double b) -> double { return a + b; }"));
  assert_non_null(strstr(src, "if (threadIdx.x == 0) v0[v2] = "));
  free(src);
  expect_shape(&k, 0, 5, CUDA_LAUNCH_BLOCK_PER_INDEX, 5, 256);
  expect_shape(&k, 1, 4, CUDA_LAUNCH_BLOCK_PER_INDEX, 3, 256);
  expect_shape(&k, 0, 0, CUDA_LAUNCH_BLOCK_PER_INDEX, 1, 256);
  kir_free(&k);
  build_row_sum(&k, 100000, 40); /* short rows: one warp each; at most 65,535 blocks */
  expect_shape(&k, 0, 100000, CUDA_LAUNCH_BLOCK_PER_INDEX, 65535, 32);
  kir_free(&k);
  build_row_sum(&k, 10, 300);
  expect_shape(&k, 0, 10, CUDA_LAUNCH_BLOCK_PER_INDEX, 10, 128);
  kir_free(&k);
  build_row_sum(&k, 1000, 15); /* rows under 16 elements: a thread per output */
  expect_shape(&k, 0, 1000, CUDA_LAUNCH_GRID_STRIDE, 4, 256);
  kir_free(&k);
  build_row_sum(&k, 1000, 16);
  expect_shape(&k, 0, 1000, CUDA_LAUNCH_BLOCK_PER_INDEX, 1000, 32);
  kir_free(&k);

  build_row_sum(&k, 0, 100); /* whole tensor: the [3, 100] loops flattened, one block */
  assert_int_equal(cuda_print_kernel(&k, NULL, &src, err, sizeof err), KILN_OK);
  assert_non_null(strstr(src, "if (blockIdx.x != 0) return;"));
  assert_non_null(strstr(src, "v4_f < 300LL; v4_f += blockDim.x"));
  assert_non_null(strstr(src, "const long long v5 = v4_f / 1LL % 100LL;"));
  free(src);
  expect_shape(&k, 0, 0, CUDA_LAUNCH_ONE_BLOCK, 1, 32 * 4);
  kir_free(&k);

  build_argmax(&k, 8, 500, true); /* the (value, index) pair combined across the block */
  assert_int_equal(cuda_print_kernel(&k, NULL, &src, err, sizeof err), KILN_OK);
  assert_non_null(strstr(src, "__shared__ long long kiln_smem_i[32];"));
  assert_non_null(strstr(src, "kiln_block_arg<true>(v4, v6, kiln_smem, kiln_smem_i);"));
  free(src);
  expect_shape(&k, 0, 8, CUDA_LAUNCH_BLOCK_PER_INDEX, 8, 128);
  kir_free(&k);
  build_argmax(&k, 8, 500, false); /* an unknown update: one thread per output, grid-stride */
  assert_int_equal(cuda_print_kernel(&k, NULL, &src, err, sizeof err), KILN_OK);
  assert_null(strstr(src, "__shfl_down_sync"));
  assert_null(strstr(src, "__shared__"));
  free(src);
  expect_shape(&k, 0, 8, CUDA_LAUNCH_GRID_STRIDE, 1, 256);
  kir_free(&k);

  build_mixed(&k, 1000);
  expect_shape(&k, 0, 1000, CUDA_LAUNCH_GRID_STRIDE, 4, 256);
  expect_shape(&k, 0, 100000000, CUDA_LAUNCH_GRID_STRIDE, 4, 256); /* clipped to the extent */
  kir_free(&k);
  build_mixed(&k, 1 << 26);
  expect_shape(&k, 0, 1 << 26, CUDA_LAUNCH_GRID_STRIDE, 65535, 256);
  kir_free(&k);
  build_flat(&k, 5000); /* the vector form: a thread per 4 indices */
  expect_shape(&k, 0, 5000, CUDA_LAUNCH_GRID_STRIDE_VEC, 5, 256);
  expect_shape(&k, 0, 1024, CUDA_LAUNCH_GRID_STRIDE_VEC, 1, 256);
  expect_shape(&k, 3, 1030, CUDA_LAUNCH_GRID_STRIDE_VEC, 2, 256);
  kir_free(&k);
  build_total(&k, 50); /* an accumulator across the parallel range */
  expect_shape(&k, 0, 50, CUDA_LAUNCH_ONE_THREAD, 1, 1);
  kir_free(&k);
}

/* Every form above passes NVRTC (sm_80, compute_90) and ptxas (sm_90). */
static void nvrtc_compiles_cooperative_kernels(void **state) {
  (void)state;
  need_nvrtc();
  kir_kernel k;
  char err[4096];
  const char *archs[] = {"sm_80", "compute_90"};
  for (int v = 0; v < 4; v++) {
    if (v == 0) build_row_sum(&k, 5, 1000);
    else if (v == 1) build_row_sum(&k, 0, 100);
    else build_argmax(&k, 8, 500, v == 2);
    for (int a = 0; a < 2; a++)
      if (cuda_check_kernel(&k, archs[a], err, sizeof err) != KILN_OK) fail_msg("%s: %s", archs[a], err);
    kir_free(&k);
  }
}

static void printer_rejects_invalid_ir(void **state) {
  (void)state;
  kir_kernel k;
  kir_init(&k, "bad");
  int out = kir_param(&k, KIR_F32, true);
  int i = kir_range(&k, 4, true);
  kir_store(&k, out, i, kir_const_i(&k, KIR_I32, 1)); /* value type differs from the buffer's */
  /* the RANGE is never closed */
  char *src = (char *)1, err[512] = "";
  assert_int_not_equal(cuda_print_kernel(&k, NULL, &src, err, sizeof err), KILN_OK);
  assert_null(src);
  assert_non_null(strstr(err, "invalid kernel IR"));
  kir_free(&k);
}

/* The vector form: a flat elementwise kernel (tests/cuda_flat_kernel.h)
 * checks alignment at entry, moves groups of 4 as float4 / int4 (the
 * offset loaded at entry and the index constant in the addresses; the
 * broadcast scalar read per lane), prints its per-element code once per
 * lane, and leaves the tail and the unaligned case to the scalar
 * grid-stride loop. Kernels of other shapes keep today's form. */
static void vector_form(void **state) {
  (void)state;
  kir_kernel k;
  char *src = NULL, err[512];
  build_flat(&k, 1000);
  assert_int_equal(cuda_print_kernel(&k, NULL, &src, err, sizeof err), KILN_OK);
  assert_non_null(strstr(src, "const bool v7_al = (v7_lo & 3LL) == 0 &&"));
  assert_non_null(strstr(src, "((unsigned long long)(v2 + v6) & 15ull) == 0"));
  assert_non_null(strstr(src, "((unsigned long long)(v2 + 4LL) & 15ull) == 0"));
  assert_non_null(strstr(src, "((unsigned long long)(v0) & 15ull) == 0"));
  assert_non_null(strstr(src, "((unsigned long long)(v3 + v6) & 15ull) == 0"));
  assert_non_null(strstr(src, "const long long v7_vn = v7_al && v7_hi > v7_lo ? (v7_hi - v7_lo) & ~3LL : 0LL;"));
  assert_non_null(strstr(src, "v7_g += 4LL * gridDim.x * blockDim.x"));
  assert_non_null(strstr(src, "const float4 v9_q = *reinterpret_cast<const float4 *>(v2 + (v7_g + v6));"));
  assert_non_null(strstr(src, "const float4 v13_q = *reinterpret_cast<const float4 *>(v2 + (v7_g + 4LL));"));
  assert_non_null(strstr(src, "#pragma unroll"));
  assert_non_null(strstr(src, "const long long v7 = v7_g + kiln_l;"));
  assert_non_null(strstr(src, "const float v9 = v9_a[kiln_l];"));
  assert_non_null(strstr(src, "const float v15 = v2[v14];")); /* the broadcast scalar */
  assert_non_null(strstr(src, "v21_a[kiln_l] = v20;"));
  assert_non_null(strstr(src, "*reinterpret_cast<float4 *>(v0 + v7_g) = "
                              "make_float4(v21_a[0], v21_a[1], v21_a[2], v21_a[3]);"));
  assert_non_null(strstr(src, "*reinterpret_cast<int4 *>(v3 + (v7_g + v6)) = make_int4("));
  assert_non_null(strstr(src, "for (long long v7 = v7_lo + v7_vn + (long long)blockIdx.x * blockDim.x + threadIdx.x;"));
  assert_non_null(strstr(src, "v0[v7] = v20;")); /* the scalar loop: the same code */
  free(src);
  kir_free(&k);

  /* x[i + a] = x[i + b] + 1 on one F32 buffer: in place (a == b) takes
   * the vector form; a shifted read, or a broadcast read x[0], of a
   * buffer the loop writes does not (no lane may read another's write) */
  for (int shape = 0; shape < 3; shape++) {
    kir_init(&k, "in place");
    int x = kir_param(&k, KIR_F32, true);
    int i = kir_range(&k, 64, true);
    int at = i;
    if (shape == 1) at = kir_alu(&k, KIR_ADD, KIR_INDEX, i, kir_const_i(&k, KIR_INDEX, 1), -1);
    if (shape == 2) at = kir_const_i(&k, KIR_INDEX, 0);
    kir_store(&k, x, i, kir_alu(&k, KIR_ADD, KIR_F32, kir_load(&k, x, at), kir_const_f(&k, KIR_F32, 1), -1));
    kir_end(&k, i);
    assert_int_equal(cuda_print_kernel(&k, NULL, &src, err, sizeof err), KILN_OK);
    if (shape == 0) assert_non_null(strstr(src, "make_float4("));
    else assert_null(strstr(src, "float4"));
    free(src);
    kir_free(&k);
  }

  /* not flat (a nested loop), an F16 store, not splittable: no vector form */
  void (*const others[])(kir_kernel *, int64_t) = {build_mixed, build_total};
  for (int i = 0; i < 3; i++) {
    if (i < 2) others[i](&k, 100);
    else build_row_sum(&k, 5, 8);
    assert_int_equal(cuda_print_kernel(&k, NULL, &src, err, sizeof err), KILN_OK);
    assert_null(strstr(src, "float4"));
    assert_null(strstr(src, "_vn"));
    free(src);
    kir_free(&k);
  }
}

/* --------------------------------------------------------------- NVRTC */

static void nvrtc_compiles_hand_built_kernels(void **state) {
  (void)state;
  need_nvrtc();
  int major = 0, minor = 0;
  assert_int_equal(cuda_nvrtc_version(&major, &minor), KILN_OK);
  print_message("NVRTC %d.%d\n", major, minor);
  kir_kernel k;
  char err[4096];
  const char *archs[] = {"sm_80", "compute_80", "sm_90", "compute_90"};
  build_mixed(&k, 1000);
  for (int a = 0; a < 4; a++)
    if (cuda_check_kernel(&k, archs[a], err, sizeof err) != KILN_OK) fail_msg("%s: %s", archs[a], err);
  kir_free(&k);
  build_total(&k, 1000);
  for (int a = 0; a < 4; a++)
    if (cuda_check_kernel(&k, archs[a], err, sizeof err) != KILN_OK) fail_msg("%s: %s", archs[a], err);
  kir_free(&k);
  build_flat(&k, 1000);
  for (int a = 0; a < 4; a++)
    if (cuda_check_kernel(&k, archs[a], err, sizeof err) != KILN_OK) fail_msg("%s: %s", archs[a], err);
  kir_free(&k);
}

static void nvrtc_reports_compile_log(void **state) {
  (void)state;
  need_nvrtc();
  char *img = NULL, err[4096];
  size_t len = 0;
  const char *src = "extern \"C\" __global__ void broken(float *p) { p[0] = undeclared_name; }\n";
  assert_int_equal(cuda_nvrtc_compile(src, "broken.cu", "sm_80", &img, &len, err, sizeof err), KILN_ERR_COMPILE);
  assert_null(img);
  assert_non_null(strstr(err, "compile log"));
  assert_non_null(strstr(err, "undeclared_name")); /* NVRTC's own diagnostic */
  assert_int_equal(cuda_nvrtc_compile(src, "broken.cu", "gfx90a", &img, &len, err, sizeof err), KILN_ERR_ARG);
  const char *ok = "extern \"C\" __global__ void fine(float *p) { p[threadIdx.x] = 1.0f; }\n";
  assert_int_equal(cuda_nvrtc_compile(ok, "fine.cu", "compute_90", &img, &len, err, sizeof err), KILN_OK);
  assert_non_null(strstr(img, ".target sm_90"));
  free(img);
  assert_int_equal(cuda_nvrtc_compile(ok, "fine.cu", "sm_90", &img, &len, err, sizeof err), KILN_OK);
  assert_true(len > 4 && memcmp(img, "\177ELF", 4) == 0); /* a CUBIN is an ELF image */
  free(img);
}

/* ------------------------------------------------ runtime workloads */

static void force(kiln_tensor *t) {
  assert_non_null(t);
  if (kiln_realize(t) != KILN_OK) fail_msg("realize: %s", kiln_last_error());
}

/* A realized view [sizes] of dtype dt starting at element `at` of a flat
 * 256-element buffer with values in [-3, 3) (zeros and halves included).
 * Every input of a dtype shares that buffer's one conversion kernel, and
 * views cost no kernel, which keeps the number of distinct kernels (and
 * NVRTC compiles) down. */
static kiln_tensor *input(kiln_dtype dt, int ndim, const int64_t *sizes, int64_t at) {
  double v[256];
  for (int i = 0; i < 256; i++) v[i] = ((i * 37) % 97) / 16.0 - 3.0;
  kiln_tensor *flat = kiln_to_dtype(kiln_from_data(KILN_F64, 1, (int64_t[]){256}, v), dt);
  force(flat);
  int64_t n = 1;
  for (int d = 0; d < ndim; d++) n *= sizes[d];
  assert_true(at + n <= 256);
  kiln_tensor *t = kiln_view(kiln_narrow(flat, 0, at, n), ndim, sizes);
  assert_non_null(t);
  return t;
}

/* acc + (f64) x; an op the dtype does not accept (x NULL) is skipped. */
static kiln_tensor *add_term(kiln_tensor *acc, kiln_tensor *x) {
  if (!x) {
    kiln_clear_error();
    return acc;
  }
  x = kiln_to_dtype(x, KILN_F64);
  return acc ? kiln_add(acc, x) : x;
}

static const kiln_dtype all_dtypes[] = {KILN_BOOL, KILN_U8,  KILN_I8,   KILN_I16, KILN_I32,
                                        KILN_I64,  KILN_F16, KILN_BF16, KILN_F32, KILN_F64};
#define N_DTYPES ((int)(sizeof all_dtypes / sizeof all_dtypes[0]))

typedef kiln_tensor *(*unary_fn)(kiln_tensor *);
typedef kiln_tensor *(*binary_fn)(kiln_tensor *, kiln_tensor *);
typedef kiln_tensor *(*scalar_fn)(kiln_tensor *, double);

static const unary_fn unaries[] = {
    kiln_neg,  kiln_abs,   kiln_sign,       kiln_exp,   kiln_exp2, kiln_log,   kiln_log2,  kiln_log1p,      kiln_expm1,
    kiln_sqrt, kiln_rsqrt, kiln_reciprocal, kiln_sin,   kiln_cos,  kiln_tan,   kiln_tanh,  kiln_sigmoid,    kiln_relu,
    kiln_gelu, kiln_silu,  kiln_erf,        kiln_floor, kiln_ceil, kiln_round, kiln_trunc, kiln_logical_not,
    kiln_asin, kiln_acos,  kiln_atan,       kiln_sinh,  kiln_cosh, kiln_asinh, kiln_acosh, kiln_atanh};
static const binary_fn binaries[] = {kiln_add,     kiln_sub,         kiln_mul,        kiln_div,        kiln_pow,
                                     kiln_maximum, kiln_minimum,     kiln_fmod,       kiln_remainder,  kiln_atan2,
                                     kiln_eq,      kiln_ne,          kiln_lt,         kiln_le,         kiln_gt,
                                     kiln_ge,      kiln_logical_and, kiln_logical_or, kiln_logical_xor};
static const scalar_fn scalars[] = {kiln_add_scalar, kiln_sub_scalar,     kiln_mul_scalar,     kiln_div_scalar,
                                    kiln_pow_scalar, kiln_maximum_scalar, kiln_minimum_scalar, kiln_eq_scalar,
                                    kiln_ne_scalar,  kiln_lt_scalar,      kiln_le_scalar,      kiln_gt_scalar,
                                    kiln_ge_scalar};

/* Per dtype: every unary op (one fused kernel), then every binary op with
 * a broadcast operand, every scalar form, where and clamp (another). */
static void elementwise_ops(kiln_dtype dt) {
  kiln_scope_begin();
  kiln_tensor *x = input(dt, 2, (int64_t[]){3, 8}, 0);
  kiln_tensor *y = input(dt, 1, (int64_t[]){8}, 100);
  kiln_tensor *acc = NULL;
  for (size_t i = 0; i < sizeof unaries / sizeof unaries[0]; i++) acc = add_term(acc, unaries[i](x));
  force(acc);
  acc = NULL;
  for (size_t i = 0; i < sizeof binaries / sizeof binaries[0]; i++) {
    /* BOOL fmod/remainder are KILN_ERR_DTYPE, as in Torch */
    bool bool_mod = dt == KILN_BOOL && (binaries[i] == kiln_fmod || binaries[i] == kiln_remainder);
    if (!bool_mod) acc = add_term(acc, binaries[i](x, y));
  }
  acc = add_term(acc, kiln_where(kiln_gt(x, y), x, y));
  acc = add_term(acc, kiln_clamp(x, -1, 2));
  for (size_t i = 0; i < sizeof scalars / sizeof scalars[0]; i++) acc = add_term(acc, scalars[i](x, 1.5));
  force(acc);
  kiln_scope_end();
}

/* Per source dtype: a cast to every dtype (one fused kernel). input()
 * already materialized F64 → every dtype on its own (a store of each). */
static void casts(kiln_dtype from) {
  kiln_scope_begin();
  kiln_tensor *x = input(from, 1, (int64_t[]){40}, 3);
  kiln_tensor *acc = NULL;
  for (int d = 0; d < N_DTYPES; d++) acc = add_term(acc, kiln_to_dtype(x, all_dtypes[d]));
  force(acc);
  kiln_scope_end();
}

static void reductions(kiln_dtype dt) {
  kiln_scope_begin();
  kiln_tensor *x = input(dt, 2, (int64_t[]){6, 33}, 50);
  int last = -1, first = 0;
  force(kiln_sum(x, 0, NULL, false));
  force(kiln_sum(x, 1, &first, false));
  force(kiln_prod(x, 1, &last, true));
  force(kiln_amax(x, 1, &last, false));
  force(kiln_argmax(x, -1, false));
  force(kiln_amin(x, 1, &first, false));
  kiln_scope_end();
}

/* Row softmax and layer norm (one kernel each), column softmax. */
static void row_kernels(kiln_dtype dt) {
  kiln_scope_begin();
  kiln_tensor *x = input(dt, 2, (int64_t[]){5, 24}, 7);
  int last = -1, first = 0;
  kiln_tensor *e = kiln_exp(kiln_sub(x, kiln_amax(x, 1, &last, true)));
  force(kiln_div(e, kiln_sum(e, 1, &last, true)));
  kiln_tensor *mu = kiln_mean(x, 1, &last, true), *d = kiln_sub(x, mu);
  kiln_tensor *var = kiln_mean(kiln_mul(d, d), 1, &last, true);
  force(kiln_mul(d, kiln_rsqrt(kiln_add_scalar(var, 1e-5))));
  kiln_tensor *c = kiln_exp(x);
  force(kiln_div(c, kiln_sum(c, 1, &first, true)));
  kiln_scope_end();
}

/* Writes through views (in place, and copy-on-write while an older
 * reader is pending) and reads through transposed and broadcast views. */
static void views(kiln_dtype dt) {
  kiln_scope_begin();
  kiln_tensor *x = input(dt, 2, (int64_t[]){6, 7}, 11);
  kiln_tensor *z = kiln_zeros(dt, 2, (int64_t[]){7, 6});
  force(z);
  assert_int_equal(kiln_fill_(kiln_narrow(z, 0, 1, 3), 1), KILN_OK);
  force(z);
  kiln_tensor *older = kiln_add(z, z);                 /* pending: sees z before the copy_ */
  assert_int_equal(kiln_copy_(z, kiln_t(x)), KILN_OK); /* transposed read */
  assert_int_equal(kiln_copy_(kiln_select(z, 1, 2), kiln_select(x, 0, 4)), KILN_OK);
  force(z);
  force(older);
  kiln_tensor *b = input(dt, 2, (int64_t[]){7, 1}, 200);
  force(kiln_mul(kiln_add(kiln_t(x), b), kiln_slice(z, 1, 0, 6, 1)));
  kiln_scope_end();
}

/* An elementwise chain with broadcasting over three shapes. */
static void chains(void) {
  kiln_scope_begin();
  kiln_tensor *a = input(KILN_F32, 3, (int64_t[]){2, 4, 5}, 0);
  kiln_tensor *b = input(KILN_F32, 1, (int64_t[]){5}, 60);
  kiln_tensor *c = input(KILN_F16, 2, (int64_t[]){4, 1}, 70);
  force(kiln_silu(kiln_mul(kiln_relu(kiln_add(kiln_mul(a, b), c)), kiln_sigmoid(b))));
  force(kiln_where(kiln_lt(a, c), kiln_to_dtype(a, KILN_BF16), kiln_full(KILN_BF16, 0, NULL, 0.5)));
  kiln_scope_end();
}

/* Whole-buffer writes stored by a later kernel (multi-output, both
 * buffers written in place): SGD with momentum and Adam updates (the
 * parameter's write stores the state's), and a write stored by the
 * elementwise kernel that reads it. */
static void whole_writes(kiln_dtype dt) {
  kiln_scope_begin();
  int64_t sz[2] = {4, 9};
  kiln_tensor *g = input(dt, 2, sz, 20), *p = kiln_clone(input(dt, 2, sz, 80)), *q = kiln_clone(p);
  kiln_optimizer *sgd = kiln_sgd(&p, 1, 0.1, 0.9, 1e-4, true);
  kiln_optimizer *adam = kiln_adam(&q, 1, 1e-3, 0.9, 0.999, 1e-8, 1e-2, true);
  for (int t = 0; t < 3; t++) {
    assert_int_equal(kiln_optimizer_step(sgd, &g), KILN_OK);
    assert_int_equal(kiln_optimizer_step(adam, &g), KILN_OK);
    kiln_tensor *both[2] = {p, q};
    assert_int_equal(kiln_realize_many(both, 2), KILN_OK);
  }
  kiln_optimizer_free(sgd);
  kiln_optimizer_free(adam);
  kiln_tensor *b = kiln_clone(g);
  force(b);
  assert_int_equal(kiln_copy_(b, kiln_mul_scalar(b, 2)), KILN_OK);
  kiln_tensor *out[2] = {b, kiln_exp(kiln_add(b, p))};
  assert_int_equal(kiln_realize_many(out, 2), KILN_OK);
  kiln_scope_end();
}

static void runtime_kernels_pass_nvrtc_and_ptxas(void **state) {
  (void)state;
  need_nvrtc();
  rt_cuda_check_reset();
  rt_set_cuda_check(1);
  cuda_emu_stats e0, e1; /* under KILN_BACKEND=cuda-emu the emulator checks each kernel instead of the hook */
  cuda_emu_get_stats(&e0);
  chains();
  for (int d = 0; d < N_DTYPES; d++) {
    elementwise_ops(all_dtypes[d]);
    casts(all_dtypes[d]);
  }
  const kiln_dtype reduce_dtypes[] = {KILN_F32, KILN_BF16, KILN_I32, KILN_BOOL};
  for (int d = 0; d < 4; d++) reductions(reduce_dtypes[d]);
  row_kernels(KILN_F32);
  row_kernels(KILN_BF16);
  views(KILN_F32);
  views(KILN_BOOL);
  whole_writes(KILN_F32);
  whole_writes(KILN_BF16);
  rt_set_cuda_check(-1);
  rt_cuda_check_stats s;
  rt_cuda_check_get(&s);
  cuda_emu_get_stats(&e1);
  if (rt_backend_selected() == &rt_backend_emu) {
    s.kernels += e1.kernels - e0.kernels;
    s.compiles += e1.checks - e0.checks;
    s.failures += e1.failures - e0.failures;
  }
  print_message("CUDA check: %lld kernels, %lld compiles (sm_80 CUBIN, compute_90 PTX + ptxas sm_90), %lld failed\n",
                (long long)s.kernels, (long long)s.compiles, (long long)s.failures);
  if (s.failures)
    fail_msg("%lld of %lld checks failed; first: %s", (long long)s.failures, (long long)s.compiles, s.first_error);
  assert_int_equal(s.unavailable, 0);
  assert_true(s.kernels >= 50);
  assert_int_equal(s.compiles, 2 * s.kernels);
}

/* ------------------------------------------------ NVRTC unavailable */

static void missing_nvrtc_is_a_device_error(void **state) {
  (void)state;
  static const char *const nowhere[] = {"libnvrtc-kiln-missing.so.99", NULL};
  cuda_nvrtc_set_search_list(nowhere);
  char err[2048] = "";
  assert_false(cuda_nvrtc_available(err, sizeof err));
  assert_non_null(strstr(err, "NVRTC not available: "));
  assert_non_null(strstr(err, "libnvrtc-kiln-missing.so.99"));
  kir_kernel k;
  build_mixed(&k, 10);
  assert_int_equal(cuda_check_kernel(&k, "sm_80", err, sizeof err), KILN_ERR_DEVICE);
  assert_non_null(strstr(err, "NVRTC not available: "));
  int major, minor;
  assert_int_equal(cuda_nvrtc_version(&major, &minor), KILN_ERR_DEVICE);
  kir_free(&k);

  /* the runtime's check counts the kernels it could not check and the CPU
   * result is unaffected (the hook is the CPU backend's: under
   * KILN_BACKEND=cuda-emu, which needs NVRTC, run this part on "llvm") */
  assert_int_equal(kiln_set_backend("llvm"), KILN_OK);
  rt_cuda_check_reset();
  rt_set_cuda_check(1);
  kiln_scope_begin();
  kiln_tensor *t = kiln_add_scalar(kiln_arange(KILN_F32, 0, 4, 1), 0.25);
  expect_values_tol(t, (double[]){0.25, 1.25, 2.25, 3.25}, 4, 0);
  kiln_scope_end();
  rt_set_cuda_check(-1);
  rt_cuda_check_stats s;
  rt_cuda_check_get(&s);
  assert_true(s.unavailable > 0);
  assert_int_equal(s.kernels, 0);
  assert_int_equal(s.failures, 0);
  cuda_nvrtc_set_search_list(NULL);
  rt_backend_reset(); /* back to $KILN_BACKEND */
}

static int teardown_all(void **state) {
  (void)state;
  cuda_nvrtc_shutdown();
  rt_cuda_check_reset();
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(printer_output),
      cmocka_unit_test(printer_rejects_invalid_ir),
      cmocka_unit_test(cooperative_form_and_launch_shape),
      cmocka_unit_test(vector_form),
      cmocka_unit_test(nvrtc_compiles_cooperative_kernels),
      cmocka_unit_test(missing_nvrtc_is_a_device_error),
      cmocka_unit_test(nvrtc_compiles_hand_built_kernels),
      cmocka_unit_test(nvrtc_reports_compile_log),
      cmocka_unit_test(runtime_kernels_pass_nvrtc_and_ptxas),
  };
  return cmocka_run_group_tests(tests, NULL, teardown_all);
}
