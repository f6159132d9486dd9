/*
 * test_cuda_runtime.c — the CUDA driver loader (runtime/cuda_driver.c)
 * and backend selection (runtime/backend.c): without a device every CUDA
 * request is a clean KILN_ERR_DEVICE "no CUDA device: <why>", never a crash
 * and never a silent run on the CPU; a missing libcuda (KILN_CUDA_LIB at a
 * nonexistent path) and the toolkit's stub libcuda (its cuInit fails) are
 * both "no CUDA"; "llvm" keeps working. Tests that need a real GPU run
 * only when rt_cuda_device_available() is true and skip with the reason
 * otherwise (fail under KILN_TEST_EXPECT_DEVICE=1, cuda_test_util.h): the device probe, a buffer round trip, and one elementwise
 * kernel compiled for the device, uploaded, launched and read back
 * (runtime/cuda_launch.c); CUDA tensors moved there and back through
 * the runtime (runtime/backend_cuda.c, device.c) with the caching allocator's reuse; under
 * the fake driver, a GPU newer than NVRTC gets a PTX kernel.
 */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <cmocka.h>

#include "cuda_backend.h"
#include "cuda_blas.h"
#include "cuda_driver.h"
#include "cuda_launch.h"
#include "cuda_test_util.h"
#include "device.h"
#include "kir.h"
#include "rt_internal.h"
#include "test_util.h"

static const char *const missing_lib[] = {"/nonexistent/libcuda.so.1", NULL};
#define STUB_LIB "/usr/local/cuda/lib64/stubs/libcuda.so"

/* KILN_CUDA_LIB as the test started: the ctest `cuda_runtime_fake` runs this
 * program against tests/fake_libcuda.c, so the device tests run too. */
static char *initial_cuda_lib;
static char *initial_cublas_lib; /* KILN_CUBLAS_LIB: tests/fake_libcublas.c under the fake */

/* Every test starts with the initial driver search, no KILN_BACKEND and no
 * selected backend; and leaves the same state for the next. */
static int reset(void **state) {
  (void)state;
  unsetenv("KILN_BACKEND");
  unsetenv("KILN_FAKE_CUDA_CC");
  if (initial_cuda_lib) setenv("KILN_CUDA_LIB", initial_cuda_lib, 1);
  else unsetenv("KILN_CUDA_LIB");
  if (initial_cublas_lib) setenv("KILN_CUBLAS_LIB", initial_cublas_lib, 1);
  else unsetenv("KILN_CUBLAS_LIB");
  rt_cuda_blas_shutdown();
  rt_cuda_driver_set_search_list(NULL);
  rt_backend_reset();
  kiln_clear_error();
  return 0;
}

/* ones([n]) * mul + add, without leaking the intermediate. */
static kiln_tensor *affine_ones(int64_t n, double mul, double add) {
  kiln_tensor *o = kiln_ones(KILN_F32, 1, &n);
  kiln_tensor *m = kiln_mul_scalar(o, mul);
  kiln_tensor *r = kiln_add_scalar(m, add);
  kiln_release(m);
  kiln_release(o);
  return r;
}

/* Skips the calling test unless a CUDA device is usable (fails instead
 * under KILN_TEST_EXPECT_DEVICE=1: cuda_test_util.h). */
static void require_device(void) {
  char why[1024], msg[1100];
  if (rt_cuda_device_available(why, sizeof why)) return;
  snprintf(msg, sizeof msg, "no CUDA device: %s", why);
  skip_without_device(msg);
}

/* require_device, and NVRTC to build kernels for it, or skip (or fail). */
static void require_device_and_nvrtc(void) {
  require_device();
  require_nvrtc();
}

static void missing_libcuda_is_no_device(void **state) {
  (void)state;
  setenv("KILN_CUDA_LIB", "/nonexistent/libcuda.so.1", 1);
  rt_cuda_driver_shutdown(); /* read KILN_CUDA_LIB again */
  char why[1024] = "";
  assert_false(rt_cuda_device_available(why, sizeof why));
  assert_non_null(strstr(why, "libcuda not found"));
  assert_non_null(strstr(why, "/nonexistent/libcuda.so.1"));
  assert_null(rt_cuda_driver(NULL));

  assert_int_equal(kiln_set_backend("cuda"), KILN_ERR_DEVICE);
  expect_error(KILN_ERR_DEVICE, "kiln_set_backend", "no CUDA device: libcuda not found", NULL);
  kiln_tensor *x = kiln_ones(KILN_F32, 0, NULL);
  assert_null(kiln_to_device(x, KILN_CUDA));
  expect_error(KILN_ERR_DEVICE, "kiln_to_device", "no CUDA device: libcuda not found", NULL);
  kiln_release(x);
}

/* The same through the search list a test can set. */
static void search_list_without_libcuda(void **state) {
  (void)state;
  rt_cuda_driver_set_search_list(missing_lib);
  char why[1024] = "";
  assert_false(rt_cuda_device_available(why, sizeof why));
  assert_non_null(strstr(why, "libcuda not found (tried /nonexistent/libcuda.so.1"));
}

/* The toolkit's link stub loads and resolves, but its cuInit fails: any
 * cuInit failure is "no CUDA", with the driver's error name. */
static void stub_libcuda_cuinit_fails(void **state) {
  (void)state;
  if (access(STUB_LIB, R_OK) != 0) {
    print_message("skipped: no %s\n", STUB_LIB);
    skip();
  }
  setenv("KILN_CUDA_LIB", STUB_LIB, 1);
  rt_cuda_driver_shutdown();
  char why[1024] = "";
  assert_false(rt_cuda_device_available(why, sizeof why));
  if (!strstr(why, "cuInit failed: CUDA_ERROR_")) fail_msg("unexpected reason: %s", why);
  assert_int_equal(kiln_set_backend("cuda"), KILN_ERR_DEVICE);
  expect_error(KILN_ERR_DEVICE, "kiln_set_backend", "no CUDA device: cuInit failed", NULL);
}

/* Whatever this machine has: without a device, "cuda" is KILN_ERR_DEVICE
 * with a reason; "llvm" works; "cuda-emu" is known; unknown names are
 * KILN_ERR_ARG. */
static void set_backend_errors(void **state) {
  (void)state;
  char why[1024] = "";
  bool have = rt_cuda_device_available(why, sizeof why);
  int st = kiln_set_backend("cuda");
  if (have) {
    assert_int_equal(st, KILN_OK); /* CUDA tensors run on the device, CPU tensors still on LLVM */
    kiln_tensor *x = affine_ones(4, 2.0, 1.0);
    expect_values_tol(x, (double[]){3, 3, 3, 3}, 4, 0);
    kiln_release(x);
  } else {
    assert_true(why[0] != 0);
    assert_int_equal(st, KILN_ERR_DEVICE);
    expect_error(KILN_ERR_DEVICE, "kiln_set_backend", "no CUDA device: ", why, NULL);
  }
  assert_int_equal(kiln_set_backend("llvm"), KILN_OK);
  /* "cuda-emu" is known: it works, or says what is missing (test_cuda_emu.c) */
  st = kiln_set_backend("cuda-emu");
  if (st != KILN_OK) expect_error(KILN_ERR_UNSUPPORTED, "kiln_set_backend", "cuda-emu needs", NULL);
  assert_int_equal(kiln_set_backend("llvm"), KILN_OK);
  assert_int_equal(kiln_set_backend("tpu"), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "unknown backend \"tpu\"", "\"cuda-emu\"", NULL);
  assert_int_equal(kiln_to_device(NULL, KILN_CUDA) == NULL, 1);
  expect_error(KILN_ERR_ARG, "kiln_to_device", NULL);
  kiln_tensor *x = kiln_ones(KILN_F32, 0, NULL);
  assert_null(kiln_to_device(x, (kiln_device)7));
  expect_error(KILN_ERR_ARG, "kiln_to_device", "unknown device 7", NULL);
  kiln_release(x);
}

/* KILN_BACKEND=cuda without a device: every force reports the clear error
 * (no silent run on the CPU) until the program selects "llvm". */
static void env_backend_cuda_without_device_fails_at_realize(void **state) {
  (void)state;
  setenv("KILN_CUDA_LIB", "/nonexistent/libcuda.so.1", 1);
  rt_cuda_driver_shutdown();
  setenv("KILN_BACKEND", "cuda", 1);
  kiln_tensor *x = affine_ones(4, 1.0, 1.0);
  assert_non_null(x);
  assert_int_equal(kiln_realize(x), KILN_ERR_DEVICE);
  expect_error(KILN_ERR_DEVICE, "kiln_realize", "no CUDA device: libcuda not found", "KILN_BACKEND=cuda", NULL);
  float v[4];
  assert_int_equal(kiln_read(x, v, sizeof v), KILN_ERR_DEVICE); /* again: not remembered as the CPU */
  expect_error(KILN_ERR_DEVICE, "no CUDA device", NULL);
  assert_int_equal(kiln_set_backend("llvm"), KILN_OK); /* the program's choice wins over the environment */
  const double want[] = {2, 2, 2, 2};
  expect_values_tol(x, want, 4, 0);
  kiln_release(x);
}

static void env_backend_unknown_and_llvm(void **state) {
  (void)state;
  setenv("KILN_BACKEND", "tpu", 1);
  kiln_tensor *x = affine_ones(3, 1.0, 2.0);
  assert_int_equal(kiln_realize(x), KILN_ERR_ARG);
  expect_error(KILN_ERR_ARG, "kiln_realize", "unknown backend \"tpu\" in KILN_BACKEND", NULL);
  setenv("KILN_BACKEND", "llvm", 1);
  const double want[] = {3, 3, 3};
  expect_values_tol(x, want, 3, 0);
  kiln_release(x);
}

/* With KILN_NVRTC_LIB pointing nowhere the backend path still reports the
 * driver's state (NVRTC is loaded only to compile): selection needs no
 * compiler, and the CPU is unaffected. */
static void missing_nvrtc_does_not_affect_backend_selection(void **state) {
  (void)state;
  static const char *const no_nvrtc[] = {"/nonexistent/libnvrtc.so", NULL};
  cuda_nvrtc_set_search_list(no_nvrtc);
  setenv("KILN_CUDA_LIB", "/nonexistent/libcuda.so.1", 1);
  rt_cuda_driver_shutdown();
  assert_int_equal(kiln_set_backend("cuda"), KILN_ERR_DEVICE);
  expect_error(KILN_ERR_DEVICE, "no CUDA device: libcuda not found", NULL);
  assert_int_equal(kiln_set_backend("llvm"), KILN_OK);
  kiln_tensor *x = affine_ones(2, 5.0, 0.0);
  const double want[] = {5, 5};
  expect_values_tol(x, want, 2, 0);
  kiln_release(x);
  cuda_nvrtc_set_search_list(NULL);
}

/* Needs a GPU: the driver reports device 0 with a compute capability. */
static void device_is_described(void **state) {
  (void)state;
  require_device();
  rt_cuda_device_info info;
  const rt_cuda_driver_api *api = rt_cuda_driver(&info);
  assert_non_null(api);
  assert_true(info.count >= 1);
  assert_true(info.cc_major >= 3);
  print_message("CUDA device 0: %s (sm_%d%d)\n", info.name, info.cc_major, info.cc_minor);
}

/* Needs a GPU: one buffer up and back through the driver's memory calls. */
static void device_round_trip(void **state) {
  (void)state;
  require_device();
  rt_cuda_device_info info;
  const rt_cuda_driver_api *api = rt_cuda_driver(&info);
  cu_context ctx = NULL;
  assert_int_equal(api->primary_ctx_retain(&ctx, info.device), CUDA_SUCCESS);
  assert_int_equal(api->ctx_set_current(ctx), CUDA_SUCCESS);
  float in[64], out[64];
  for (int i = 0; i < 64; i++) in[i] = (float)i * 0.5f, out[i] = -1;
  cu_deviceptr d = 0;
  assert_int_equal(api->mem_alloc(&d, sizeof in), CUDA_SUCCESS);
  assert_int_equal(api->memcpy_htod(d, in, sizeof in), CUDA_SUCCESS);
  assert_int_equal(api->memcpy_dtoh(out, d, sizeof out), CUDA_SUCCESS);
  assert_int_equal(api->mem_free(d), CUDA_SUCCESS);
  assert_memory_equal(in, out, sizeof in);
}

/* out[i] = a[i] * 2 + 1 (F32), i < n. */
static void build_affine(kir_kernel *k, int64_t n) {
  kir_init(k, "affine");
  int out = kir_param(k, KIR_F32, true);
  int a = kir_param(k, KIR_F32, false);
  int i = kir_range(k, n, true);
  int x = kir_alu(k, KIR_MUL, KIR_F32, kir_load(k, a, i), kir_const_f(k, KIR_F32, 2), -1);
  kir_store(k, out, i, kir_alu(k, KIR_ADD, KIR_F32, x, kir_const_f(k, KIR_F32, 1), -1));
  kir_end(k, i);
}

/* Without a device the launch layer answers every call with the reason. */
static void launch_layer_without_device(void **state) {
  (void)state;
  setenv("KILN_CUDA_LIB", "/nonexistent/libcuda.so.1", 1);
  rt_cuda_driver_shutdown();
  char err[1024] = "";
  cu_deviceptr p = 1;
  assert_int_equal(rt_cuda_buffer_alloc(64, &p, err, sizeof err), KILN_ERR_DEVICE);
  assert_true(p == 0);
  assert_non_null(strstr(err, "no CUDA device: libcuda not found"));
  kir_kernel k;
  build_affine(&k, 8);
  rt_cuda_kernel ck;
  err[0] = 0;
  assert_int_equal(rt_cuda_kernel_load(&k, &ck, err, sizeof err), KILN_ERR_DEVICE);
  assert_non_null(strstr(err, "no CUDA device"));
  kir_free(&k);
  rt_cuda_buffer_free(0);
}

/* Needs a device (the fake driver will do: no kernel runs): CUDA tensors
 * through the runtime's real-device path — kiln_to_device is one
 * cuMemcpyHtoD into a cuMemAlloc'ed buffer, reads copy back after the
 * stream, freed buffers are reused by the caching allocator, and the
 * copies are profiled with backend "cuda". */
static void device_tensors_copy_and_reuse(void **state) {
  (void)state;
  require_device();
  assert_int_equal(kiln_set_backend("cuda"), KILN_OK);
  float data[6] = {1.5f, -2, 3, 4.25f, -5, 6};
  kiln_tensor *x = kiln_from_data(KILN_F32, 2, (int64_t[]){2, 3}, data);
  rt_device_stats s0, s1;
  rt_device_get_stats(&s0);
  for (int round = 0; round < 2; round++) {
    kiln_scope_begin();
    if (round == 1) kiln_profile_begin();
    kiln_tensor *d = kiln_to_device(x, KILN_CUDA);
    assert_non_null(d);
    assert_int_equal(kiln_device_of(d), KILN_CUDA);
    float got[6] = {0};
    assert_int_equal(kiln_read(d, got, sizeof got), KILN_OK);
    assert_memory_equal(got, data, sizeof data);
    assert_float_equal(kiln_get(d, (int64_t[]){1, 1}), -5, 0);
    kiln_tensor *back = kiln_to_device(d, KILN_CPU);
    assert_int_equal(kiln_device_of(back), KILN_CPU);
    memset(got, 0, sizeof got);
    assert_int_equal(kiln_read(back, got, sizeof got), KILN_OK);
    assert_memory_equal(got, data, sizeof data);
    assert_null(kiln_add(x, d));
    expect_error(KILN_ERR_DEVICE, "kiln_add: expected all tensors to be on the same device", NULL);
    if (round == 1) {
      kiln_profile_end();
      kiln_kernel_record r;
      assert_int_equal(kiln_profile_count(), 2);
      assert_int_equal(kiln_profile_get(0, &r), KILN_OK);
      assert_string_equal(r.name, "copy_h2d_24");
      assert_string_equal(r.backend, "cuda");
      assert_int_equal(kiln_profile_get(1, &r), KILN_OK);
      assert_string_equal(r.name, "copy_d2h_24");
    }
    kiln_scope_end();
    if (round == 0) rt_device_get_stats(&s0);
  }
  rt_device_get_stats(&s1);
  assert_int_equal(s1.allocs, s0.allocs); /* the second round reused the first one's block */
  /* device to device (copy-on-write of an in-place write): cuMemcpyDtoD */
  graph_buffer *a = NULL, *b = NULL;
  char err[1024];
  assert_int_equal(rt_device_alloc(sizeof data, &a, err, sizeof err), KILN_OK);
  assert_int_equal(rt_device_upload(a, data, sizeof data, err, sizeof err), KILN_OK);
  assert_int_equal(rt_buffer_copy_to(a, KILN_CUDA, &b, err, sizeof err), KILN_OK);
  assert_ptr_not_equal(a->data, b->data);
  float back[6] = {0};
  assert_int_equal(rt_device_download(back, b, 0, sizeof back, err, sizeof err), KILN_OK);
  assert_memory_equal(back, data, sizeof data);
  assert_int_equal(rt_device_download(back, b, 4 * sizeof(float), sizeof(float), err, sizeof err), KILN_OK);
  assert_float_equal(back[0], data[4], 0);
  graph_buffer_release(a);
  graph_buffer_release(b);
  assert_true(s1.reuses > s0.reuses);
  rt_device_trim();
  rt_device_get_stats(&s1);
  assert_int_equal(s1.cached_bytes, 0);
  kiln_release(x);
  expect_no_error();
}

/* Needs a device and NVRTC: an op on a CUDA tensor is compiled by NVRTC
 * for the device's sm_XX, loaded, and launched with the runtime's
 * argument layout (output, args, fargs, inputs; the host arrays
 * uploaded). A GPU computes it; the fake driver, which runs only its one
 * known kernel, rejects the launch: the error comes back as
 * KILN_ERR_DEVICE with the driver's message, nothing aborts, and the
 * tensors stay usable. */
static void device_kernel_on_cuda_tensor(void **state) {
  (void)state;
  require_device_and_nvrtc();
  rt_cuda_device_info info;
  assert_non_null(rt_cuda_driver(&info));
  bool fake = strcmp(info.name, "Fake GPU") == 0;
  assert_int_equal(kiln_set_backend("cuda"), KILN_OK);
  kiln_scope_begin();
  kiln_tensor *x = kiln_from_data(KILN_F32, 1, (int64_t[]){5}, (float[]){1, 2, 3, 4, 5});
  kiln_tensor *d = kiln_to_device(x, KILN_CUDA);
  kiln_tensor *y = kiln_add_scalar(kiln_mul_scalar(d, 2), 0.5);
  assert_int_equal(kiln_device_of(y), KILN_CUDA);
  float got[5];
  int st = kiln_read(y, got, sizeof got);
  if (fake) {
    assert_int_equal(st, KILN_ERR_DEVICE);
    expect_error(KILN_ERR_DEVICE, "kiln_read: cuLaunchKernel: CUDA_ERROR_INVALID_VALUE", NULL);
  } else {
    assert_int_equal(st, KILN_OK);
    for (int i = 0; i < 5; i++) assert_float_equal(got[i], (i + 1) * 2 + 0.5, 0);
  }
  assert_int_equal(kiln_read(d, got, sizeof got), KILN_OK); /* a transfer: no kernel */
  assert_float_equal(got[4], 5, 0);
  kiln_scope_end();
  expect_no_error();
}

/* Needs a GPU (and NVRTC): upload, launch and download one elementwise
 * kernel; the grid-stride loop covers n > one block, and CUDA events time
 * it. */
static void device_elementwise_kernel(void **state) {
  (void)state;
  require_device_and_nvrtc();
  enum { N = 1000 };
  float in[N], out[N];
  for (int i = 0; i < N; i++) in[i] = (float)i - 300.0f, out[i] = 0;
  kir_kernel k;
  build_affine(&k, N);
  rt_cuda_kernel ck;
  char err[4096];
  int st = rt_cuda_kernel_load(&k, &ck, err, sizeof err);
  if (st != KILN_OK) fail_msg("%s", err);
  cu_deviceptr bufs[2];
  assert_int_equal(rt_cuda_buffer_alloc(sizeof out, &bufs[0], err, sizeof err), KILN_OK);
  assert_int_equal(rt_cuda_buffer_alloc(sizeof in, &bufs[1], err, sizeof err), KILN_OK);
  assert_int_equal(rt_cuda_copy_to_device(bufs[1], in, sizeof in, err, sizeof err), KILN_OK);
  float ms = -1;
  st = rt_cuda_kernel_launch(&ck, bufs, 2, 0, N, &ms, err, sizeof err);
  if (st != KILN_OK) fail_msg("%s", err);
  assert_true(ms >= 0);
  assert_int_equal(rt_cuda_copy_to_host(out, bufs[0], sizeof out, err, sizeof err), KILN_OK);
  for (int i = 0; i < N; i++) assert_float_equal(out[i], in[i] * 2 + 1, 0);
  rt_cuda_buffer_free(bufs[0]);
  rt_cuda_buffer_free(bufs[1]);
  rt_cuda_kernel_unload(&ck);
  kir_free(&k);
}

/* The fake driver's record of the images cuModuleLoadData took. */
typedef void (*module_loads_fn)(int *elf, int *ptx, const char **target);
static module_loads_fn fake_module_loads(void) {
  void *h = initial_cuda_lib ? dlopen(initial_cuda_lib, RTLD_NOW | RTLD_NOLOAD) : NULL;
  module_loads_fn f = NULL;
  void *sym = h ? dlsym(h, "fake_cuda_module_loads") : NULL;
  memcpy(&f, &sym, sizeof f);
  if (h) dlclose(h); /* drops only the reference RTLD_NOLOAD took */
  return f;
}

/* Fake driver only: it runs only the affine kernel (out, a, start, end),
 * and a launch of other arguments is rejected however they lie. Here the
 * slots of its bounds hold device pointers 640 bytes apart, as the
 * realize path's kernels (out, args, fargs, inputs, ...) may put them:
 * read as [start, end) they match the launch's geometry, and a fake that
 * trusted them wrote out[start] — an address far past any buffer. */
static void fake_rejects_other_arguments(void **state) {
  (void)state;
  require_device_and_nvrtc();
  if (!fake_module_loads()) {
    print_message("skipped: not the fake driver\n");
    skip();
  }
  enum { N = 640 };
  kir_kernel k;
  build_affine(&k, N);
  rt_cuda_kernel ck;
  char err[4096];
  if (rt_cuda_kernel_load(&k, &ck, err, sizeof err) != KILN_OK) fail_msg("%s", err);
  cu_deviceptr bufs[4];
  assert_int_equal(rt_cuda_buffer_alloc(N * sizeof(float), &bufs[0], err, sizeof err), KILN_OK);
  assert_int_equal(rt_cuda_buffer_alloc(N * sizeof(float), &bufs[1], err, sizeof err), KILN_OK);
  assert_int_equal(rt_cuda_buffer_alloc(2 * N, &bufs[2], err, sizeof err), KILN_OK);
  bufs[3] = bufs[2] + N;
  ck.n_params = 4;
  assert_int_equal(rt_cuda_kernel_launch(&ck, bufs, 4, 0, N, NULL, err, sizeof err), KILN_ERR_DEVICE);
  assert_non_null(strstr(err, "cuLaunchKernel: CUDA_ERROR_INVALID_VALUE"));
  for (int i = 0; i < 3; i++) rt_cuda_buffer_free(bufs[i]);
  rt_cuda_kernel_unload(&ck);
  kir_free(&k);
}

/* Loads and runs the affine kernel on the device now probed; returns the
 * arch NVRTC compiled for in arch. */
static void load_and_run_affine(char *arch, size_t len) {
  enum { N = 700 };
  float in[N], out[N];
  for (int i = 0; i < N; i++) in[i] = (float)i * 0.25f - 9, out[i] = 0;
  kir_kernel k;
  build_affine(&k, N);
  rt_cuda_kernel ck;
  char err[4096];
  if (rt_cuda_kernel_load(&k, &ck, err, sizeof err) != KILN_OK) fail_msg("%s", err);
  snprintf(arch, len, "%s", ck.arch);
  cu_deviceptr bufs[2];
  assert_int_equal(rt_cuda_buffer_alloc(sizeof out, &bufs[0], err, sizeof err), KILN_OK);
  assert_int_equal(rt_cuda_buffer_alloc(sizeof in, &bufs[1], err, sizeof err), KILN_OK);
  assert_int_equal(rt_cuda_copy_to_device(bufs[1], in, sizeof in, err, sizeof err), KILN_OK);
  if (rt_cuda_kernel_launch(&ck, bufs, 2, 0, N, NULL, err, sizeof err) != KILN_OK) fail_msg("%s", err);
  assert_int_equal(rt_cuda_copy_to_host(out, bufs[0], sizeof out, err, sizeof err), KILN_OK);
  for (int i = 0; i < N; i++) assert_float_equal(out[i], in[i] * 2 + 1, 0);
  rt_cuda_buffer_free(bufs[0]);
  rt_cuda_buffer_free(bufs[1]);
  rt_cuda_kernel_unload(&ck);
  kir_free(&k);
}

/* Fake driver only (its compute capability comes from KILN_FAKE_CUDA_CC):
 * a device NVRTC knows gets a CUBIN for sm_80; a GPU newer than NVRTC
 * (9.9: no sm_99) gets PTX for the highest compute_XX <= 99 NVRTC lists,
 * which the driver takes as PTX text targeting that sm_XX; a device older
 * than every listed arch is a clean KILN_ERR_UNSUPPORTED. */
static void device_kernel_ptx_fallback(void **state) {
  (void)state;
  require_device_and_nvrtc();
  char arch[32], err[1024];
  module_loads_fn loads = fake_module_loads();
  if (!loads) {
    print_message("skipped: not the fake driver (its compute capability cannot be changed)\n");
    skip();
  }
  int elf0, ptx0, elf1, ptx1;
  const char *target;
  loads(&elf0, &ptx0, &target);
  load_and_run_affine(arch, sizeof arch); /* 8.0: NVRTC 12/13 know sm_80 */
  assert_string_equal(arch, "sm_80");
  loads(&elf1, &ptx1, &target);
  assert_int_equal(elf1, elf0 + 1);
  assert_int_equal(ptx1, ptx0);

  setenv("KILN_FAKE_CUDA_CC", "99", 1);
  rt_cuda_driver_shutdown(); /* probe again: the device is now 9.9 */
  rt_cuda_device_info info;
  assert_non_null(rt_cuda_driver(&info));
  assert_int_equal(info.cc_major * 10 + info.cc_minor, 99);
  load_and_run_affine(arch, sizeof arch);
  if (strncmp(arch, "compute_", 8) != 0) fail_msg("expected a PTX target for sm_99, got %s", arch);
  int xx = atoi(arch + 8);
  assert_true(xx >= 75 && xx < 99);
  loads(&elf0, &ptx0, &target);
  assert_int_equal(elf0, elf1); /* no CUBIN this time */
  assert_int_equal(ptx0, ptx1 + 1);
  char want[32];
  snprintf(want, sizeof want, "sm_%d", xx); /* PTX for compute_XX targets sm_XX */
  assert_string_equal(target, want);
  print_message("sm_99 device: NVRTC PTX for %s (.target %s)\n", arch, target);

  setenv("KILN_FAKE_CUDA_CC", "10", 1);
  rt_cuda_driver_shutdown(); /* 1.0: older than anything NVRTC knows */
  kir_kernel k;
  build_affine(&k, 8);
  rt_cuda_kernel ck;
  assert_int_equal(rt_cuda_kernel_load(&k, &ck, err, sizeof err), KILN_ERR_UNSUPPORTED);
  assert_non_null(strstr(err, "knows no architecture at or below the device's sm_10"));
  kir_free(&k);
}

/* The fake cuBLAS's call counters at this moment; fake is false (and the
 * counts 0) when KILN_CUBLAS_LIB is not the fake. */
typedef struct cublas_counts {
  bool fake;
  int creates, gemms, batched;
} cublas_counts;

static cublas_counts cublas_now(void) {
  typedef void (*calls_fn)(int *creates, int *gemms, int *batched);
  void *h = initial_cublas_lib ? dlopen(initial_cublas_lib, RTLD_NOW | RTLD_NOLOAD) : NULL;
  calls_fn f = NULL;
  void *sym = h ? dlsym(h, "fake_cublas_calls") : NULL;
  memcpy(&f, &sym, sizeof f);
  if (h) dlclose(h);
  cublas_counts c = {.fake = f != NULL};
  if (f) f(&c.creates, &c.gemms, &c.batched);
  return c;
}

/* No cuBLAS call since `before` (when the fake can tell). */
static void expect_no_cublas_call(cublas_counts before) {
  cublas_counts now = cublas_now();
  if (now.fake) assert_int_equal(now.creates + now.gemms + now.batched, before.creates + before.gemms + before.batched);
}

/* A host tensor of small exact values (sums of products stay exact). */
static kiln_tensor *host_values(kiln_dtype dt, int nd, const int64_t *sizes, int seed) {
  int64_t n = 1;
  for (int d = 0; d < nd; d++) n *= sizes[d];
  double *v = malloc((size_t)n * sizeof *v);
  float *f = malloc((size_t)n * sizeof *f);
  for (int64_t i = 0; i < n; i++) v[i] = (double)((i * 7 + seed * 13) % 23 - 11) / 8.0, f[i] = (float)v[i];
  kiln_tensor *t = kiln_from_data(dt, nd, sizes, dt == KILN_F64 ? (void *)v : (void *)f);
  free(v);
  free(f);
  return t;
}

/* The values of t as doubles (t F32 or F64; a device tensor is copied). */
static double *values_of(kiln_tensor *t) {
  int64_t n = kiln_numel(t);
  bool f64 = kiln_dtype_of(t) == KILN_F64;
  double *v = malloc((size_t)(n > 0 ? n : 1) * sizeof *v);
  float *f = malloc((size_t)(n > 0 ? n : 1) * sizeof *f);
  int st = f64 ? kiln_read(t, v, (size_t)n * sizeof *v) : kiln_read(t, f, (size_t)n * sizeof *f);
  if (st != KILN_OK) fail_msg("kiln_read: %s", kiln_last_error());
  for (int64_t i = 0; !f64 && i < n; i++) v[i] = f[i];
  free(f);
  return v;
}

/* matmul(a', b') of a and b moved to the device equals the CPU's, where
 * x' is x or (tx) x with its last two dims transposed — a view on both
 * sides, so the device operand is a transposed layout, not a copy. */
static void check_device_matmul(kiln_tensor *a, kiln_tensor *b, bool ta, bool tb) {
  kiln_scope_begin();
  kiln_tensor *da = kiln_to_device(a, KILN_CUDA), *db = kiln_to_device(b, KILN_CUDA);
  if (ta) a = kiln_transpose(a, -2, -1), da = kiln_transpose(da, -2, -1);
  if (tb) b = kiln_transpose(b, -2, -1), db = kiln_transpose(db, -2, -1);
  kiln_tensor *dev = kiln_matmul(da, db), *cpu = kiln_matmul(a, b);
  if (!dev) fail_msg("%s", kiln_last_error());
  assert_int_equal(kiln_device_of(dev), KILN_CUDA);
  assert_int_equal(kiln_numel(dev), kiln_numel(cpu));
  double *got = values_of(dev), *want = values_of(cpu);
  for (int64_t i = 0; i < kiln_numel(cpu); i++)
    if (got[i] != want[i]) fail_msg("element %lld: device %g, CPU %g", (long long)i, got[i], want[i]);
  free(got);
  free(want);
  kiln_scope_end();
}

/* Needs a device and cuBLAS (the fakes will do: every operand moved with
 * one copy, no kernel): F32/F64 products of CUDA tensors go to cuBLAS —
 * square, rectangular, transposed views, bmm (one strided-batched call),
 * a broadcast batch (stride 0), 4-D batches (a loop), mv and dot — and
 * equal the CPU's (OpenBLAS) exactly; the profiler says "cublas". */
static void device_matmul_through_cublas(void **state) {
  (void)state;
  require_device();
  char why[1024];
  assert_int_equal(kiln_set_backend("cuda"), KILN_OK);
  if (!rt_cuda_blas_available(why, sizeof why)) {
    if (initial_cublas_lib) fail_msg("KILN_CUBLAS_LIB is set, but no cuBLAS: %s", why);
    print_message("skipped: no cuBLAS: %s\n", why);
    skip();
  }
  cublas_counts before = cublas_now();
  kiln_scope_begin();
  kiln_profile_begin();
  check_device_matmul(host_values(KILN_F32, 2, (int64_t[]){4, 4}, 1), host_values(KILN_F32, 2, (int64_t[]){4, 4}, 2),
                      false, false);
  kiln_profile_end();
  bool seen = false;
  for (int i = 0; i < kiln_profile_count(); i++) {
    kiln_kernel_record r;
    assert_int_equal(kiln_profile_get(i, &r), KILN_OK);
    if (strcmp(r.backend, "cublas") == 0 && strcmp(r.name, "cublas_sgemm_4x4x4") == 0) seen = true;
    if (strcmp(r.backend, "cuda") == 0) assert_true(strncmp(r.name, "copy_", 5) == 0); /* no generated kernel */
  }
  assert_true(seen);
  check_device_matmul(host_values(KILN_F32, 2, (int64_t[]){3, 5}, 3), host_values(KILN_F32, 2, (int64_t[]){5, 2}, 4),
                      false, false);
  check_device_matmul(host_values(KILN_F64, 2, (int64_t[]){2, 6}, 5), host_values(KILN_F64, 2, (int64_t[]){6, 3}, 6),
                      false, false);
  check_device_matmul(host_values(KILN_F32, 2, (int64_t[]){5, 3}, 7), host_values(KILN_F32, 2, (int64_t[]){5, 4}, 8),
                      true, false);
  check_device_matmul(host_values(KILN_F32, 2, (int64_t[]){3, 5}, 9), host_values(KILN_F32, 2, (int64_t[]){2, 5}, 10),
                      false, true);
  check_device_matmul(host_values(KILN_F64, 2, (int64_t[]){6, 2}, 11),
                      host_values(KILN_F64, 2, (int64_t[]){3, 6}, 12), true, true);
  check_device_matmul(host_values(KILN_F32, 3, (int64_t[]){3, 2, 4}, 13),
                      host_values(KILN_F32, 3, (int64_t[]){3, 4, 5}, 14), false, false);
  check_device_matmul(host_values(KILN_F64, 3, (int64_t[]){3, 4, 2}, 15),
                      host_values(KILN_F64, 2, (int64_t[]){4, 5}, 16), true, false); /* broadcast batch */
  check_device_matmul(host_values(KILN_F32, 4, (int64_t[]){2, 2, 3, 4}, 17),
                      host_values(KILN_F32, 4, (int64_t[]){2, 2, 4, 2}, 18), false, false);
  check_device_matmul(host_values(KILN_F32, 2, (int64_t[]){3, 4}, 19), host_values(KILN_F32, 1, (int64_t[]){4}, 20),
                      false, false);
  check_device_matmul(host_values(KILN_F32, 1, (int64_t[]){7}, 21), host_values(KILN_F32, 1, (int64_t[]){7}, 22),
                      false, false);
  kiln_scope_end();
  cublas_counts after = cublas_now();
  if (after.fake) {
    assert_int_equal(after.batched - before.batched, 2); /* the two 3-D products */
    assert_int_equal(after.gemms - before.gemms, 12);    /* six 2-D, mv, dot: one each; the 4-D one: 4 */
  }
  expect_no_error();
}

/* Without cuBLAS (KILN_CUBLAS_LIB at nothing), a product of CUDA tensors
 * is the generated kernel: on a GPU it computes; the fake driver, which
 * runs only its one known kernel, rejects the launch — and cuBLAS is
 * never called. */
static void device_matmul_without_cublas_is_a_kernel(void **state) {
  (void)state;
  require_device();
  char why[1024];
  setenv("KILN_CUBLAS_LIB", "/nonexistent/libcublas.so", 1);
  rt_cuda_blas_shutdown();
  assert_int_equal(kiln_set_backend("cuda"), KILN_OK);
  assert_false(rt_cuda_blas_available(why, sizeof why));
  assert_non_null(strstr(why, "libcublas not found (tried /nonexistent/libcublas.so"));
  cublas_counts before = cublas_now();
  rt_cuda_device_info info;
  assert_non_null(rt_cuda_driver(&info));
  kiln_scope_begin();
  kiln_tensor *a = host_values(KILN_F32, 2, (int64_t[]){2, 3}, 1), *b = host_values(KILN_F32, 2, (int64_t[]){3, 2}, 2);
  kiln_tensor *p = kiln_matmul(kiln_to_device(a, KILN_CUDA), kiln_to_device(b, KILN_CUDA));
  float got[4];
  int st = kiln_read(p, got, sizeof got);
  if (strcmp(info.name, "Fake GPU") == 0) {
    assert_int_equal(st, KILN_ERR_DEVICE);
    expect_error(KILN_ERR_DEVICE, "cuLaunchKernel", NULL);
  } else {
    assert_int_equal(st, KILN_OK);
    double *want = values_of(kiln_matmul(a, b));
    for (int i = 0; i < 4; i++) assert_float_equal(got[i], want[i], 0);
    free(want);
  }
  kiln_scope_end();
  expect_no_cublas_call(before);
}

/* Under cuda-emu, products of CUDA tensors are generated kernels run on
 * the host: cuBLAS is never loaded or called (its fake's counters do not
 * move), and the values are the CPU's. */
static void emu_matmul_never_tries_cublas(void **state) {
  (void)state;
  char why[1024];
  if (!cuda_emu_available(why, sizeof why)) skip_without_emu(why);
  assert_int_equal(kiln_set_backend("cuda-emu"), KILN_OK);
  cublas_counts before = cublas_now();
  kiln_scope_begin();
  kiln_profile_begin();
  check_device_matmul(host_values(KILN_F32, 2, (int64_t[]){4, 3}, 1), host_values(KILN_F32, 2, (int64_t[]){4, 2}, 2),
                      true, false);
  kiln_profile_end();
  kiln_scope_end();
  bool kernel = false;
  for (int i = 0; i < kiln_profile_count(); i++) {
    kiln_kernel_record r;
    assert_int_equal(kiln_profile_get(i, &r), KILN_OK);
    assert_string_not_equal(r.backend, "cublas");
    if (strcmp(r.backend, "cuda-emu") == 0 && strncmp(r.name, "copy_", 5) != 0) kernel = true;
  }
  assert_true(kernel);
  expect_no_cublas_call(before);
  assert_int_equal(kiln_set_backend("llvm"), KILN_OK);
  expect_no_error();
}

/* A [rows, cols] view with strides (s_row, s_col). */
static graph_view mat_view(int64_t rows, int64_t cols, int64_t s_row, int64_t s_col) {
  graph_view v = {.ndim = 2, .sizes = {rows, cols}, .strides = {s_row, s_col}};
  return v;
}

/* Which matmul operands cuBLAS cannot take as they are (ops/linalg.c
 * copies them contiguous on the device first): no device needed. */
static void blas_operand_layouts(void **state) {
  (void)state;
  graph_view ok[] = {mat_view(3, 4, 4, 1), mat_view(4, 3, 1, 4), mat_view(3, 2, 4, 1), mat_view(1, 4, 0, 1),
                     mat_view(4, 1, 3, 0), mat_view(3, 4, 9, 1)};
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) assert_false(rt_blas_view_needs_copy(&ok[i]));
  graph_view copy[] = {mat_view(3, 4, 0, 1), mat_view(3, 4, 8, 2), mat_view(3, 4, 1, 2), mat_view(3, 4, 2, 1)};
  for (size_t i = 0; i < sizeof copy / sizeof copy[0]; i++) assert_true(rt_blas_view_needs_copy(&copy[i]));
}

int main(void) {
  const char *lib = getenv("KILN_CUDA_LIB");
  initial_cuda_lib = lib ? strdup(lib) : NULL;
  const char *blas = getenv("KILN_CUBLAS_LIB");
  initial_cublas_lib = blas ? strdup(blas) : NULL;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(missing_libcuda_is_no_device, reset, reset),
      cmocka_unit_test_setup_teardown(search_list_without_libcuda, reset, reset),
      cmocka_unit_test_setup_teardown(set_backend_errors, reset, reset),
      cmocka_unit_test_setup_teardown(env_backend_cuda_without_device_fails_at_realize, reset, reset),
      cmocka_unit_test_setup_teardown(env_backend_unknown_and_llvm, reset, reset),
      cmocka_unit_test_setup_teardown(missing_nvrtc_does_not_affect_backend_selection, reset, reset),
      cmocka_unit_test_setup_teardown(device_is_described, reset, reset),
      cmocka_unit_test_setup_teardown(device_round_trip, reset, reset),
      cmocka_unit_test_setup_teardown(launch_layer_without_device, reset, reset),
      cmocka_unit_test_setup_teardown(device_elementwise_kernel, reset, reset),
      cmocka_unit_test_setup_teardown(device_kernel_ptx_fallback, reset, reset),
      cmocka_unit_test_setup_teardown(fake_rejects_other_arguments, reset, reset),
      cmocka_unit_test_setup_teardown(device_tensors_copy_and_reuse, reset, reset),
      cmocka_unit_test_setup_teardown(device_kernel_on_cuda_tensor, reset, reset),
      cmocka_unit_test_setup_teardown(blas_operand_layouts, reset, reset),
      cmocka_unit_test_setup_teardown(device_matmul_through_cublas, reset, reset),
      cmocka_unit_test_setup_teardown(device_matmul_without_cublas_is_a_kernel, reset, reset),
      cmocka_unit_test_setup_teardown(emu_matmul_never_tries_cublas, reset, reset),
      /* last: once loaded, the stub answers to its soname libcuda.so.1 */
      cmocka_unit_test_setup_teardown(stub_libcuda_cuinit_fails, reset, reset),
  };
  int failed = cmocka_run_group_tests(tests, NULL, NULL);
  free(initial_cuda_lib);
  free(initial_cublas_lib);
  return failed;
}
