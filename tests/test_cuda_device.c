/*
 * test_cuda_device.c — tensors on KILN_CUDA (kiln_to_device) under the
 * "cuda-emu" backend: device memory is a separate host allocation and
 * every kernel is the emulator's build of its CUDA C (runtime/device.h).
 * Values are checked against known results and against the same program
 * on KILN_CPU: moves both ways, an elementwise chain, reductions, softmax,
 * a write through a view seen by its base, matmul, casts, index, masked
 * and join ops, printing and saving, the mixed-device error (and the
 * calls that need host memory), and reuse by the device's caching
 * allocator.
 * Skipped with a message when cuda-emu is unavailable (no NVRTC or host
 * compiler), unless $CI is set and /usr/local/cuda exists, or NVRTC is
 * missing under KILN_TEST_EXPECT_DEVICE=1 (then they fail).
 *
 * On a machine with a GPU, KILN_TEST_DEVICE=cuda runs the same tests on
 * the real device (backend "cuda": NVRTC builds launched by the driver);
 * it fails rather than skips when the device cannot be selected.
 */
#define _GNU_SOURCE
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
#include "cuda_test_util.h"
#include "device.h"
#include "kiln/kiln.h"
#include "rt_internal.h"
#include "test_util.h"

/* True when KILN_TEST_DEVICE=cuda asks for the real device. */
static bool real_device(void) {
  const char *e = getenv("KILN_TEST_DEVICE");
  return e && strcmp(e, "cuda") == 0;
}

/* The backend name of kernel and copy records on KILN_CUDA tensors. */
static const char *device_backend(void) { return real_device() ? "cuda" : "cuda-emu"; }

/* Selects cuda-emu (or the real device), or skips the test when it cannot
 * run here (fails under CI with /usr/local/cuda, and, when NVRTC is what
 * is missing, under KILN_TEST_EXPECT_DEVICE=1: cuda_test_util.h). */
static void use_emu(void) {
  if (real_device()) {
    if (kiln_set_backend("cuda") != KILN_OK) fail_msg("KILN_TEST_DEVICE=cuda: %s", kiln_last_error());
    return;
  }
  char why[1024] = "";
  if (cuda_emu_available(why, sizeof why) && kiln_set_backend("cuda-emu") == KILN_OK) return;
  if (!why[0]) snprintf(why, sizeof why, "%s", kiln_last_error());
  kiln_clear_error();
  skip_without_emu(why);
}

static int back_to_llvm(void **state) {
  (void)state;
  kiln_clear_error();
  return kiln_set_backend("llvm");
}

/* x on the device, checked to be there. */
static kiln_tensor *cuda(kiln_tensor *x) {
  kiln_tensor *d = kiln_to_device(x, KILN_CUDA);
  assert_non_null(d);
  assert_int_equal(kiln_device_of(d), KILN_CUDA);
  return d;
}

/* The values of a CUDA tensor equal those of the same op on the CPU. */
static void expect_same(kiln_tensor *on_cuda, kiln_tensor *on_cpu, double tol) {
  assert_int_equal(kiln_device_of(on_cuda), KILN_CUDA);
  assert_int_equal(kiln_device_of(on_cpu), KILN_CPU);
  int64_t n = kiln_numel(on_cpu);
  double want[256];
  assert_true(n <= 256);
  assert_int_equal(kiln_read(kiln_to_dtype(on_cpu, KILN_F64), want, sizeof want), KILN_OK);
  expect_values_tol(on_cuda, want, n, tol);
}

/* expect_same for results of any size: every element within tol. */
static void expect_close(kiln_tensor *on_cuda, kiln_tensor *on_cpu, double tol) {
  assert_int_equal(kiln_device_of(on_cuda), KILN_CUDA);
  int64_t n = kiln_numel(on_cpu);
  assert_int_equal(kiln_numel(on_cuda), n);
  double *got = malloc((size_t)n * sizeof *got), *want = malloc((size_t)n * sizeof *want);
  assert_non_null(got), assert_non_null(want);
  assert_int_equal(kiln_read(kiln_to_dtype(on_cuda, KILN_F64), got, (size_t)n * sizeof *got), KILN_OK);
  assert_int_equal(kiln_read(kiln_to_dtype(on_cpu, KILN_F64), want, (size_t)n * sizeof *want), KILN_OK);
  for (int64_t i = 0; i < n; i++)
    if (!(fabs(got[i] - want[i]) <= tol)) fail_msg("element %lld: %.9g, want %.9g", (long long)i, got[i], want[i]);
  free(got), free(want);
}

static void move_there_and_back(void **state) {
  (void)state;
  use_emu();
  float data[12];
  for (int i = 0; i < 12; i++) data[i] = (float)i * 1.5f - 4;
  kiln_scope_begin();
  kiln_tensor *x = kiln_from_data(KILN_F32, 2, (int64_t[]){3, 4}, data);
  kiln_tensor *d = cuda(x);
  assert_false(kiln_is_set_to(d, x));
  assert_true(kiln_is_set_to(kiln_to_device(d, KILN_CUDA), d)); /* already there: d itself */
  float got[12] = {0};
  assert_int_equal(kiln_read(d, got, sizeof got), KILN_OK);
  assert_memory_equal(got, data, sizeof data);
  kiln_tensor *back = kiln_to_device(d, KILN_CPU);
  assert_int_equal(kiln_device_of(back), KILN_CPU);
  memset(got, 0, sizeof got);
  assert_int_equal(kiln_read(back, got, sizeof got), KILN_OK);
  assert_memory_equal(got, data, sizeof data);
  /* a strided view goes over through a copy kernel */
  kiln_tensor *tt = cuda(kiln_t(x));
  double want[12];
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 3; j++) want[i * 3 + j] = data[j * 4 + i];
  expect_values_tol(tt, want, 12, 0);
  assert_float_equal(kiln_get(d, (int64_t[]){2, 3}), data[11], 0);
  assert_float_equal(kiln_item(kiln_select(kiln_select(d, 0, 1), 0, 2)), data[6], 0);
  kiln_scope_end();
  expect_no_error();
}

static void elementwise_chain(void **state) {
  (void)state;
  use_emu();
  kiln_scope_begin();
  kiln_tensor *x = kiln_arange(KILN_F32, 0, 8, 1);
  kiln_tensor *d = cuda(x);
  kiln_tensor *y = kiln_add(kiln_exp(kiln_mul_scalar(d, 0.5)), kiln_tanh(kiln_add_scalar(d, -3)));
  assert_int_equal(kiln_device_of(y), KILN_CUDA);
  double want[8];
  for (int i = 0; i < 8; i++) want[i] = exp(i * 0.5) + tanh(i - 3.0);
  expect_values_tol(y, want, 8, 1e-4);
  kiln_tensor *cpu = kiln_add(kiln_exp(kiln_mul_scalar(x, 0.5)), kiln_tanh(kiln_add_scalar(x, -3)));
  expect_same(y, cpu, 1e-5);
  /* a 0-d CPU scalar may join a CUDA op, as in Torch */
  kiln_tensor *z = kiln_mul(d, kiln_scalar(KILN_F32, 3));
  assert_non_null(z);
  assert_int_equal(kiln_device_of(z), KILN_CUDA);
  assert_float_equal(kiln_get(z, (int64_t[]){5}), 15, 0);
  /* and a 0-d CUDA tensor may join a CPU op, which stays on the CPU */
  kiln_tensor *s = kiln_sum(d, 0, NULL, false); /* 28, on the device */
  kiln_tensor *w = kiln_sub(x, s);
  assert_non_null(w);
  assert_int_equal(kiln_device_of(w), KILN_CPU);
  double want_w[8];
  for (int i = 0; i < 8; i++) want_w[i] = i - 28.0;
  expect_values_tol(w, want_w, 8, 0);
  assert_int_equal(kiln_device_of(kiln_mul_scalar(s, 2)), KILN_CUDA); /* scalars only: stays there */
  kiln_scope_end();
  expect_no_error();
}

static void reductions(void **state) {
  (void)state;
  use_emu();
  float data[4 * 25];
  for (int i = 0; i < 100; i++) data[i] = (float)((i * 37) % 101) - 50;
  kiln_scope_begin();
  kiln_tensor *x = kiln_from_data(KILN_F32, 2, (int64_t[]){4, 25}, data);
  kiln_tensor *d = cuda(x);
  expect_same(kiln_sum(kiln_mul_scalar(d, 2), 1, (int[]){1}, false), kiln_sum(kiln_mul_scalar(x, 2), 1, (int[]){1}, false),
              1e-3);
  expect_same(kiln_sum(d, 1, (int[]){0}, false), kiln_sum(x, 1, (int[]){0}, false), 1e-3);
  expect_same(kiln_amax(d, 0, NULL, false), kiln_amax(x, 0, NULL, false), 0);
  expect_same(kiln_argmax(d, 1, false), kiln_argmax(x, 1, false), 0);
  expect_same(kiln_mean(d, 0, NULL, false), kiln_mean(x, 0, NULL, false), 1e-5);
  double total = 0;
  for (int i = 0; i < 100; i++) total += data[i];
  assert_float_equal(kiln_item(kiln_sum(d, 0, NULL, false)), total, 1e-3);
  kiln_scope_end();
  expect_no_error();
}

static void softmax_rows(void **state) {
  (void)state;
  use_emu();
  float data[] = {0, logf(2), logf(5), 1, 1, 1};
  kiln_scope_begin();
  kiln_tensor *d = cuda(kiln_from_data(KILN_F32, 2, (int64_t[]){2, 3}, data));
  kiln_tensor *s = kiln_softmax(d, -1);
  assert_int_equal(kiln_device_of(s), KILN_CUDA);
  double want[] = {1 / 8.0, 2 / 8.0, 5 / 8.0, 1 / 3.0, 1 / 3.0, 1 / 3.0};
  expect_values_tol(s, want, 6, 1e-6);
  kiln_scope_end();
  expect_no_error();
}

/* narrow + fill_ on a CUDA tensor: the base sees the write; an op recorded
 * before it does not (program order). */
static void write_through_view(void **state) {
  (void)state;
  use_emu();
  kiln_scope_begin();
  kiln_tensor *d = cuda(kiln_zeros(KILN_F32, 1, (int64_t[]){5}));
  assert_int_equal(kiln_realize(d), KILN_OK); /* the write below is then in place, */
  kiln_tensor *before = kiln_add_scalar(d, 1); /* after a device copy for this reader */
  kiln_tensor *n = kiln_narrow(d, 0, 1, 3);
  assert_int_equal(kiln_fill_(n, 7), KILN_OK);
  assert_int_equal(kiln_device_of(d), KILN_CUDA);
  expect_values_tol(d, (double[]){0, 7, 7, 7, 0}, 5, 0);
  expect_values_tol(before, (double[]){1, 1, 1, 1, 1}, 5, 0);
  /* copy_ from the CPU into a CUDA view */
  kiln_tensor *src = kiln_arange(KILN_F32, 10, 12, 1);
  assert_int_equal(kiln_copy_(kiln_narrow(d, 0, 3, 2), src), KILN_OK);
  expect_values_tol(d, (double[]){0, 7, 7, 10, 11}, 5, 0);
  expect_values_tol(kiln_to_device(d, KILN_CPU), (double[]){0, 7, 7, 10, 11}, 5, 0);
  kiln_scope_end();
  expect_no_error();
}

/* matmul on CUDA tensors: the tiled GEMM kernel (runtime/cuda_gemm_run.c;
 * under cuda-emu its CUDA C built for the host), not host BLAS; F32 and
 * F64, transposed views, batched with a broadcast operand, batch dims no
 * one stride steps (then on the host), and 1-D; a bias, relu and shift
 * fused into its stores. */
static void matmul(void **state) {
  (void)state;
  use_emu();
  float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {7, 8, 9, 10, 11, 12};
  kiln_scope_begin();
  kiln_tensor *ha = kiln_from_data(KILN_F32, 2, (int64_t[]){2, 3}, a);
  kiln_tensor *hb = kiln_from_data(KILN_F32, 2, (int64_t[]){3, 2}, b);
  kiln_tensor *c = kiln_matmul(cuda(ha), cuda(hb));
  assert_non_null(c);
  assert_int_equal(kiln_device_of(c), KILN_CUDA);
  expect_values_tol(c, (double[]){58, 64, 139, 154}, 4, 1e-5);
  /* an epilogue after it runs on the device */
  kiln_tensor *r = kiln_relu(kiln_add_scalar(c, -100));
  assert_int_equal(kiln_device_of(r), KILN_CUDA);
  expect_values_tol(r, (double[]){0, 0, 39, 54}, 4, 1e-5);
  expect_same(kiln_matmul(cuda(kiln_t(hb)), cuda(kiln_t(ha))), kiln_matmul(kiln_t(hb), kiln_t(ha)), 1e-5);
  kiln_manual_seed(7);
  kiln_tensor *x = kiln_randn(KILN_F64, 3, (int64_t[]){2, 5, 7});
  kiln_tensor *y = kiln_randn(KILN_F64, 2, (int64_t[]){7, 3});
  kiln_tensor *v = kiln_randn(KILN_F64, 1, (int64_t[]){7});
  expect_same(kiln_matmul(cuda(x), cuda(y)), kiln_matmul(x, y), 1e-12); /* F64 accumulates in F64 */
  expect_same(kiln_matmul(cuda(x), cuda(v)), kiln_matmul(x, v), 1e-12);
  kiln_tensor *w = kiln_randn(KILN_F32, 4, (int64_t[]){4, 2, 70, 33}), *z = kiln_randn(KILN_F32, 2, (int64_t[]){33, 66});
  expect_close(kiln_matmul(cuda(w), cuda(z)), kiln_matmul(w, z), 1e-4);         /* z broadcast over 4 x 2 */
  kiln_tensor *wp = kiln_permute(w, 4, (int[]){1, 0, 3, 2});                     /* [2, 4, 33, 70]: no one batch stride */
  kiln_tensor *zt = kiln_randn(KILN_F32, 2, (int64_t[]){70, 5});
  expect_close(kiln_matmul(cuda(wp), cuda(zt)), kiln_matmul(wp, zt), 1e-4);
  kiln_profile_begin();
  assert_int_equal(kiln_realize(kiln_matmul(cuda(ha), cuda(hb))), KILN_OK);
  kiln_profile_end();
  kiln_kernel_record rec;
  assert_true(kiln_profile_count() >= 1);
  bool tiled = false;
  for (int i = 0; i < kiln_profile_count(); i++) {
    assert_int_equal(kiln_profile_get(i, &rec), KILN_OK);
    if (strcmp(rec.backend, "cublas") != 0) assert_string_equal(rec.backend, device_backend()); /* no "blas" record */
    tiled |= strcmp(rec.name, "cuda_gemm_2x2x3") == 0;
  }
  if (!real_device()) assert_true(tiled);
  /* relu(a @ b + bias[N]) - 100: under cuda-emu (and on a device without
   * cuBLAS) one kernel, the tiled GEMM with the epilogue before its stores */
  float bias[2] = {-60, -150};
  kiln_tensor *dbias = cuda(kiln_from_data(KILN_F32, 1, (int64_t[]){2}, bias));
  assert_int_equal(kiln_realize(dbias), KILN_OK); /* (a parameter on the device: realized before the product) */
  rt_set_fusion(1); /* the fused kernel is fusion's (CI also runs the suite with KILN_FUSE=0) */
  kiln_profile_begin();
  kiln_tensor *f = kiln_add_scalar(kiln_relu(kiln_add(kiln_matmul(cuda(ha), cuda(hb)), dbias)), -100);
  assert_int_equal(kiln_realize(f), KILN_OK);
  kiln_profile_end();
  rt_set_fusion(-1);
  bool fused = false;
  for (int i = 0; i < kiln_profile_count(); i++) {
    assert_int_equal(kiln_profile_get(i, &rec), KILN_OK);
    fused |= strcmp(rec.name, "cuda_gemm_2x2x3_bias_relu_add") == 0;
  }
  if (!real_device()) assert_true(fused);
  expect_values_tol(f, (double[]){-100, -100, -21, -96}, 4, 1e-4);
  kiln_scope_end();
  expect_no_error();
}

static void casts(void **state) {
  (void)state;
  use_emu();
  float data[] = {-2.7f, -0.5f, 0, 1.5f, 3.9f, 300.25f};
  kiln_scope_begin();
  kiln_tensor *d = cuda(kiln_from_data(KILN_F32, 1, (int64_t[]){6}, data));
  kiln_tensor *i = kiln_to_dtype(d, KILN_I32);
  assert_int_equal(kiln_device_of(i), KILN_CUDA);
  assert_int_equal(kiln_dtype_of(i), KILN_I32);
  expect_values_tol(i, (double[]){-2, 0, 0, 1, 3, 300}, 6, 0);
  expect_values_tol(kiln_to_dtype(d, KILN_BOOL), (double[]){1, 1, 0, 1, 1, 1}, 6, 0);
  expect_values_tol(kiln_to_dtype(d, KILN_F16), (double[]){-2.69921875, -0.5, 0, 1.5, 3.900390625, 300.25}, 6, 0);
  kiln_scope_end();
  expect_no_error();
}

static void index_select_and_print(void **state) {
  (void)state;
  use_emu();
  kiln_scope_begin();
  kiln_tensor *d = cuda(kiln_arange(KILN_F32, 0, 6, 1));
  kiln_tensor *idx = cuda(kiln_from_data(KILN_I64, 1, (int64_t[]){3}, (int64_t[]){4, 0, 4}));
  kiln_tensor *g = kiln_index_select(d, 0, idx);
  assert_non_null(g);
  assert_int_equal(kiln_device_of(g), KILN_CUDA);
  expect_values_tol(g, (double[]){4, 0, 4}, 3, 0);
  char *s = kiln_to_string(g);
  assert_non_null(s);
  assert_non_null(strstr(s, "[kiln.FloatTensor of size 3]"));
  free(s);
  /* saving copies back from the device; the file loads on the CPU */
  char path[] = "/tmp/kiln_cuda_device_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  assert_int_equal(kiln_save_npy(kiln_narrow(d, 0, 2, 3), path), KILN_OK);
  kiln_tensor *loaded = kiln_load_npy(path);
  unlink(path);
  assert_non_null(loaded);
  assert_int_equal(kiln_device_of(loaded), KILN_CPU);
  expect_values_tol(loaded, (double[]){2, 3, 4}, 3, 0);
  kiln_scope_end();
  expect_no_error();
}

/* Index, masked and join ops on CUDA tensors: the masks and index lists
 * they build on the host follow their arguments to the device. */
static void index_masked_and_join_ops(void **state) {
  (void)state;
  use_emu();
  kiln_scope_begin();
  kiln_tensor *d = cuda(kiln_arange(KILN_F32, 0, 6, 1));
  kiln_tensor *idx = cuda(kiln_from_data(KILN_I64, 1, (int64_t[]){2}, (int64_t[]){1, 4}));
  assert_int_equal(kiln_index_fill_(d, 0, idx, -1), KILN_OK);
  expect_values_tol(d, (double[]){0, -1, 2, 3, -1, 5}, 6, 0);
  kiln_tensor *src = cuda(kiln_from_data(KILN_F32, 1, (int64_t[]){2}, (float[]){10, 20}));
  assert_int_equal(kiln_index_copy_(d, 0, idx, src), KILN_OK);
  expect_values_tol(d, (double[]){0, 10, 2, 3, 20, 5}, 6, 0);
  assert_int_equal(kiln_index_add_(d, 0, idx, src), KILN_OK); /* the extern loop, through the host */
  expect_values_tol(d, (double[]){0, 20, 2, 3, 40, 5}, 6, 0);
  assert_int_equal(kiln_index_copy_(d, 0, idx, src), KILN_OK);
  kiln_tensor *sidx = cuda(kiln_from_data(KILN_I64, 1, (int64_t[]){1}, (int64_t[]){0}));
  assert_int_equal(kiln_scatter_value_(d, 0, sidx, 9), KILN_OK);
  expect_values_tol(d, (double[]){9, 10, 2, 3, 20, 5}, 6, 0);
  assert_int_equal(kiln_fill_(kiln_narrow(d, 0, 0, 1), 0), KILN_OK);
  kiln_tensor *mask = kiln_gt_scalar(d, 4);
  assert_int_equal(kiln_device_of(mask), KILN_CUDA);
  kiln_tensor *sel = kiln_masked_select(d, mask);
  assert_int_equal(kiln_device_of(sel), KILN_CUDA);
  expect_values_tol(sel, (double[]){10, 20, 5}, 3, 0);
  kiln_tensor *nz = kiln_nonzero(mask);
  assert_int_equal(kiln_device_of(nz), KILN_CUDA);
  expect_values_tol(nz, (double[]){1, 4, 5}, 3, 0);
  assert_int_equal(kiln_masked_fill_(d, mask, 0), KILN_OK);
  expect_values_tol(d, (double[]){0, 0, 2, 3, 0, 0}, 6, 0);
  kiln_tensor *c = kiln_cat((kiln_tensor *[]){d, src}, 2, 0);
  assert_non_null(c);
  assert_int_equal(kiln_device_of(c), KILN_CUDA);
  expect_values_tol(c, (double[]){0, 0, 2, 3, 0, 0, 10, 20}, 8, 0);
  assert_null(kiln_cat((kiln_tensor *[]){d, kiln_ones(KILN_F32, 1, (int64_t[]){2})}, 2, 0));
  expect_error(KILN_ERR_DEVICE, "kiln_cat: expected all tensors to be on the same device", NULL);
  kiln_scope_end();
  expect_no_error();
}

static double twice(double x, void *ctx) {
  (void)ctx;
  return 2 * x;
}

/* CPU and CUDA tensors in one op: KILN_ERR_DEVICE with Torch's message;
 * the chain then returns NULL and keeps the first error. */
static void mixed_devices_fail(void **state) {
  (void)state;
  use_emu();
  kiln_scope_begin();
  kiln_tensor *x = kiln_ones(KILN_F32, 1, (int64_t[]){4});
  kiln_tensor *d = cuda(x);
  kiln_tensor *bad = kiln_add(x, d);
  assert_null(bad);
  assert_int_equal(kiln_last_status(), KILN_ERR_DEVICE);
  assert_string_equal(kiln_last_error(),
                      "kiln_add: expected all tensors to be on the same device, but found KILN_CPU and KILN_CUDA");
  assert_null(kiln_mul_scalar(kiln_exp(bad), 2));
  expect_error(KILN_ERR_DEVICE, "kiln_add: expected all tensors", NULL);
  assert_null(kiln_matmul(kiln_view(d, 2, (int64_t[]){2, 2}), kiln_view(x, 2, (int64_t[]){2, 2})));
  expect_error(KILN_ERR_DEVICE, "kiln_matmul", "found KILN_CUDA and KILN_CPU", NULL);
  assert_null(kiln_where(kiln_gt_scalar(d, 0), x, d));
  expect_error(KILN_ERR_DEVICE, "kiln_where", "same device", NULL);
  assert_null(kiln_data(d));
  expect_error(KILN_ERR_DEVICE, "kiln_data", "KILN_CUDA", "kiln_to_device(t, KILN_CPU)", NULL);
  assert_int_equal(kiln_apply_(d, twice, NULL), KILN_ERR_DEVICE);
  expect_error(KILN_ERR_DEVICE, "kiln_apply_", "KILN_CUDA", NULL);
  /* the tensors are unharmed */
  expect_values_tol(kiln_add(d, d), (double[]){2, 2, 2, 2}, 4, 0);
  kiln_scope_end();
  expect_no_error();
}

/* Freed device buffers are kept by size class and handed out again. */
static void allocator_reuses_blocks(void **state) {
  (void)state;
  use_emu();
  rt_device_trim();
  rt_device_stats s0, s1, s2;
  int64_t n = 1000;
  kiln_tensor *x = kiln_ones(KILN_F32, 1, &n);
  for (int round = 0; round < 3; round++) {
    if (round == 1) rt_device_get_stats(&s0);
    kiln_scope_begin();
    kiln_tensor *d = cuda(x);
    kiln_tensor *y = kiln_mul_scalar(d, round + 1);
    assert_float_equal(kiln_item(kiln_sum(y, 0, NULL, false)), 1000.0 * (round + 1), 0);
    kiln_scope_end();
  }
  rt_device_get_stats(&s1);
  print_message("device allocator: %lld allocs, %lld reuses, %lld bytes cached\n", (long long)s1.allocs,
                (long long)s1.reuses, (long long)s1.cached_bytes);
  assert_int_equal(s1.allocs, s0.allocs); /* rounds 2 and 3 made nothing new */
  assert_true(s1.reuses >= s0.reuses + 4);
  assert_true(s1.cached_bytes > 0);
  rt_device_trim();
  rt_device_get_stats(&s2);
  assert_int_equal(s2.cached_bytes, 0);
  kiln_release(x);
  expect_no_error();
}

/* The copies and kernels are profiled; the copy is one transfer. */
/* Forced together, a+b, a-b and exp(a)*b on the device are one
 * multi-output kernel (after the two uploads), with the CPU's values. */
static void multi_output_on_the_device(void **state) {
  (void)state;
  use_emu();
  kiln_scope_begin();
  kiln_tensor *a = kiln_sub_scalar(kiln_arange(KILN_F32, 0, 40, 1), 20), *b = kiln_arange(KILN_F32, 1, 41, 1);
  assert_int_equal(kiln_realize_many((kiln_tensor *[]){a, b}, 2), KILN_OK);
  kiln_tensor *da = cuda(a), *db = cuda(b);
  assert_int_equal(kiln_realize_many((kiln_tensor *[]){da, db}, 2), KILN_OK);
  rt_set_fusion(1);
  kiln_profile_begin();
  kiln_tensor *r[3] = {kiln_add(da, db), kiln_sub(da, db), kiln_mul(kiln_exp(kiln_mul_scalar(da, 0.1)), db)};
  assert_int_equal(kiln_realize_many(r, 3), KILN_OK);
  kiln_profile_end();
  rt_set_fusion(-1);
  assert_int_equal(kiln_profile_count(), 1);
  expect_same(r[0], kiln_add(a, b), 0);
  expect_same(r[1], kiln_sub(a, b), 0);
  expect_same(r[2], kiln_mul(kiln_exp(kiln_mul_scalar(a, 0.1)), b), 1e-5);
  kiln_scope_end();
  expect_no_error();
}

static void profiled_on_the_device(void **state) {
  (void)state;
  use_emu();
  kiln_scope_begin();
  kiln_tensor *x = kiln_from_data(KILN_F32, 1, (int64_t[]){4}, (float[]){1, 2, 3, 4});
  kiln_realize(x);
  kiln_profile_begin();
  kiln_tensor *d = cuda(x);
  assert_int_equal(kiln_realize(kiln_exp(d)), KILN_OK);
  kiln_profile_end();
  int n = kiln_profile_count();
  assert_true(n >= 2);
  kiln_kernel_record r;
  assert_int_equal(kiln_profile_get(0, &r), KILN_OK);
  assert_string_equal(r.name, "copy_h2d_16");
  assert_string_equal(r.backend, device_backend());
  assert_int_equal(kiln_profile_get(n - 1, &r), KILN_OK);
  assert_string_equal(r.backend, device_backend());
  kiln_scope_end();
  expect_no_error();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(move_there_and_back, back_to_llvm),
      cmocka_unit_test_teardown(elementwise_chain, back_to_llvm),
      cmocka_unit_test_teardown(reductions, back_to_llvm),
      cmocka_unit_test_teardown(softmax_rows, back_to_llvm),
      cmocka_unit_test_teardown(write_through_view, back_to_llvm),
      cmocka_unit_test_teardown(matmul, back_to_llvm),
      cmocka_unit_test_teardown(casts, back_to_llvm),
      cmocka_unit_test_teardown(index_select_and_print, back_to_llvm),
      cmocka_unit_test_teardown(index_masked_and_join_ops, back_to_llvm),
      cmocka_unit_test_teardown(mixed_devices_fail, back_to_llvm),
      cmocka_unit_test_teardown(allocator_reuses_blocks, back_to_llvm),
      cmocka_unit_test_teardown(profiled_on_the_device, back_to_llvm),
      cmocka_unit_test_teardown(multi_output_on_the_device, back_to_llvm),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
