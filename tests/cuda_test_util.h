/*
 * cuda_test_util.h — what the CUDA tests (tests/test_cuda_*.c) do when
 * the CUDA device or NVRTC they need is missing (include after cmocka.h).
 *
 * By default such a test skips, printing why. With
 * KILN_TEST_EXPECT_DEVICE=1 the run promises a device and NVRTC (a GPU
 * machine, or ctest's cuda_runtime_fake with the stand-in driver and a
 * toolkit), so a test that would skip for want of either fails instead,
 * with the reason: a skip there would hide that the device paths never
 * ran. A missing host C++ compiler (cuda-emu) or the toolkit's stub
 * libcuda is not covered by the promise and still skips.
 */
#ifndef KILN_TEST_CUDA_TEST_UTIL_H
#define KILN_TEST_CUDA_TEST_UTIL_H

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda_backend.h"

/* True when KILN_TEST_EXPECT_DEVICE=1. */
static inline bool test_expect_device(void) {
  const char *e = getenv("KILN_TEST_EXPECT_DEVICE");
  return e && strcmp(e, "1") == 0;
}

/* The calling test cannot run: no CUDA device or no NVRTC, `why`. Skips
 * it with the reason, or fails it under KILN_TEST_EXPECT_DEVICE=1. */
static inline void skip_without_device(const char *why) {
  if (test_expect_device()) fail_msg("KILN_TEST_EXPECT_DEVICE=1, but %s", why);
  print_message("skipped: %s\n", why);
  skip();
}

/* Returns when NVRTC can be loaded, else skip_without_device. */
static inline void require_nvrtc(void) {
  char why[1024];
  if (!cuda_nvrtc_available(why, sizeof why)) skip_without_device(why);
}

/* cuda-emu is unavailable (`why`, from cuda_emu_available or
 * kiln_set_backend): a failure under $CI on a machine with
 * /usr/local/cuda (CI must run these tests); else skip_without_device
 * when NVRTC is what is missing, else (no host C++ compiler) a plain
 * skip. */
static inline void skip_without_emu(const char *why) {
  const char *ci = getenv("CI");
  if (ci && *ci && access("/usr/local/cuda", F_OK) == 0) fail_msg("cuda-emu unavailable under CI: %s", why);
  require_nvrtc();
  print_message("skipped: cuda-emu unavailable: %s\n", why);
  skip();
}

#endif /* KILN_TEST_CUDA_TEST_UTIL_H */
