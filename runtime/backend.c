/*
 * backend.c — which backend runs kernels: "llvm" (the CPU, default),
 * "cuda" (NVIDIA GPUs through the driver API, cuda_driver.h)
 * or "cuda-emu" (the CUDA code path run on the CPU: every kernel printed
 * as CUDA C, checked by NVRTC/ptxas, and that source compiled for the host
 * by the system C++ compiler; codegen_cuda/cuda_emu.c). Selecting
 * "cuda-emu" without NVRTC or a host C++ compiler is an error.
 *
 * The choice comes from kiln_set_backend (rt_backend_select) or, when the
 * program never called it, from $KILN_BACKEND, read by the first realize
 * (rt_backend_ready). A request for "cuda" that cannot be met is an error
 * every time — KILN_ERR_DEVICE "no CUDA device: <why>" — never a silent
 * fall-back to the CPU: with KILN_BACKEND=cuda and no device, every force
 * fails with that message until the program selects "llvm" itself.
 *
 * Under "cuda", tensors on KILN_CUDA run on device 0 (runtime/device.h)
 * and CPU tensors keep running on LLVM; under "cuda-emu" both run through
 * the emulator, KILN_CUDA tensors in emulated device memory.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_backend.h"
#include "cuda_driver.h"
#include "rt_internal.h"

enum { BACKEND_UNSET = -1, BACKEND_LLVM = 0, BACKEND_CUDA_EMU = 1, BACKEND_CUDA = 2 };

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int backend = BACKEND_UNSET; /* guarded by lock; read relaxed on the fast path */

int rt_cuda_require(char *err, size_t errlen) {
  char why[1024];
  if (rt_cuda_device_available(why, sizeof why) && rt_cuda_driver(NULL)) return KILN_OK;
  snprintf(err, errlen, "no CUDA device: %s", why);
  return KILN_ERR_DEVICE;
}

/* Under lock: KILN_OK and the backend set, or an error in err. */
static int select_locked(const char *name, const char *source, char *err, size_t errlen) {
  if (strcmp(name, "llvm") == 0) {
    __atomic_store_n(&backend, BACKEND_LLVM, __ATOMIC_RELAXED);
    return KILN_OK;
  }
  if (strcmp(name, "cuda") == 0) {
    int st = rt_cuda_require(err, errlen);
    if (st == KILN_OK) __atomic_store_n(&backend, BACKEND_CUDA, __ATOMIC_RELAXED);
    return st;
  }
  if (strcmp(name, "cuda-emu") == 0) {
    if (!cuda_emu_available(err, errlen)) return KILN_ERR_UNSUPPORTED;
    __atomic_store_n(&backend, BACKEND_CUDA_EMU, __ATOMIC_RELAXED);
    return KILN_OK;
  }
  snprintf(err, errlen, "unknown backend \"%s\"%s (expected \"llvm\", \"cuda\" or \"cuda-emu\")", name, source);
  return KILN_ERR_ARG;
}

int rt_backend_select(const char *name, char *err, size_t errlen) {
  pthread_mutex_lock(&lock);
  int st = select_locked(name, "", err, errlen);
  pthread_mutex_unlock(&lock);
  return st;
}

int rt_backend_ready(char *err, size_t errlen) {
  if (__atomic_load_n(&backend, __ATOMIC_RELAXED) != BACKEND_UNSET) return KILN_OK;
  pthread_mutex_lock(&lock);
  int st = KILN_OK;
  if (backend == BACKEND_UNSET) {
    const char *env = getenv("KILN_BACKEND");
    if (!env || !*env) __atomic_store_n(&backend, BACKEND_LLVM, __ATOMIC_RELAXED);
    else st = select_locked(env, " in KILN_BACKEND", err, errlen);
    if (st != KILN_OK && strncmp(env, "cuda", 4) == 0 && strlen(err) < errlen)
      snprintf(err + strlen(err), errlen - strlen(err), " (KILN_BACKEND=%s)", env);
  }
  pthread_mutex_unlock(&lock);
  return st;
}

bool rt_backend_is_emu(void) { return __atomic_load_n(&backend, __ATOMIC_RELAXED) == BACKEND_CUDA_EMU; }

void rt_backend_reset(void) {
  pthread_mutex_lock(&lock);
  __atomic_store_n(&backend, BACKEND_UNSET, __ATOMIC_RELAXED);
  pthread_mutex_unlock(&lock);
}
