/*
 * backend.c — which backend runs kernels: "llvm" (the CPU, default) or
 * "cuda" (NVIDIA GPUs through the driver API, codegen_cuda/cuda_driver.h).
 *
 * The choice comes from kiln_set_backend (rt_backend_select) or, when the
 * program never called it, from $KILN_BACKEND, read by the first realize
 * (rt_backend_ready). A request for "cuda" that cannot be met is an error
 * every time — KILN_ERR_DEVICE "no CUDA device: <why>" — never a silent
 * fall-back to the CPU: with KILN_BACKEND=cuda and no device, every force
 * fails with that message until the program selects "llvm" itself.
 *
 * The CUDA backend cannot run kernels yet (docs/cuda.md): with a device
 * present, "cuda" gives KILN_ERR_UNSUPPORTED naming the device.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_driver.h"
#include "runtime.h"

enum { BACKEND_UNSET = -1, BACKEND_LLVM = 0 };

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int backend = BACKEND_UNSET; /* guarded by lock; read relaxed on the fast path */

int rt_cuda_require(const char *what, char *err, size_t errlen) {
  char why[1024];
  cuda_device_info info;
  if (!cuda_device_available(why, sizeof why) || !cuda_driver(&info)) {
    snprintf(err, errlen, "no CUDA device: %s", why);
    return KILN_ERR_DEVICE;
  }
  snprintf(err, errlen, "%s: the CUDA backend cannot run kernels yet (device 0: %s, sm_%d%d)", what, info.name,
           info.cc_major, info.cc_minor);
  return KILN_ERR_UNSUPPORTED;
}

/* Under lock: KILN_OK and the backend set, or an error in err. */
static int select_locked(const char *name, const char *source, char *err, size_t errlen) {
  if (strcmp(name, "llvm") == 0) {
    __atomic_store_n(&backend, BACKEND_LLVM, __ATOMIC_RELAXED);
    return KILN_OK;
  }
  if (strcmp(name, "cuda") == 0) return rt_cuda_require("backend \"cuda\"", err, errlen);
  snprintf(err, errlen, "unknown backend \"%s\"%s (expected \"llvm\" or \"cuda\")", name, source);
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
    if (st != KILN_OK && strlen(err) + 20 < errlen && strcmp(env, "cuda") == 0) strcat(err, " (KILN_BACKEND=cuda)");
  }
  pthread_mutex_unlock(&lock);
  return st;
}

void rt_backend_reset(void) {
  pthread_mutex_lock(&lock);
  __atomic_store_n(&backend, BACKEND_UNSET, __ATOMIC_RELAXED);
  pthread_mutex_unlock(&lock);
}
