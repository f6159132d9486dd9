/*
 * backend.c — which backend runs kernels (backend.h): "llvm" (the CPU,
 * default), "cuda" (NVIDIA GPUs through the driver API, cuda_driver.h)
 * or "cuda-emu" (the CUDA code path run on the CPU: every kernel printed
 * as CUDA C, checked by NVRTC/ptxas, and that source compiled for the host
 * by the system C++ compiler; codegen_cuda/cuda_emu.c). Each is a struct
 * of operations filled by its own file; this one keeps the table of them,
 * the selection, and the rule saying which runs a node.
 *
 * The choice comes from kiln_set_backend (rt_backend_select) or, when the
 * program never called it, from $KILN_BACKEND, read by the first realize
 * (rt_backend_ready). Selecting asks the backend's probe: "cuda-emu"
 * without NVRTC or a host C++ compiler is KILN_ERR_UNSUPPORTED, and a
 * request for "cuda" that cannot be met is an error every time —
 * KILN_ERR_DEVICE "no CUDA device: <why>" — never a silent fall-back to
 * the CPU: with KILN_BACKEND=cuda and no device, every force fails with
 * that message until the program selects "llvm" itself.
 *
 * Under "cuda" (and under "llvm" when a device is present), tensors on
 * KILN_CUDA run on device 0 and CPU tensors keep running on LLVM; under
 * "cuda-emu" both run through the emulator, KILN_CUDA tensors in emulated
 * device memory (rt_backend_for, rt_backend_of).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "rt_internal.h"

/* Every backend, in the order kiln_set_backend's error lists them. */
static const rt_backend *const backends[] = {&rt_backend_llvm, &rt_backend_cuda, &rt_backend_emu};
enum { N_BACKENDS = sizeof backends / sizeof backends[0] };

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static const rt_backend *selected; /* NULL until selected; written under lock, read relaxed on the fast path */

/* "\"llvm\", \"cuda\" or \"cuda-emu\"": the names of the table. */
static void list_names(char *buf, size_t len) {
  size_t used = 0;
  buf[0] = 0;
  for (int i = 0; i < N_BACKENDS && used < len; i++) {
    const char *sep = i == 0 ? "" : i == N_BACKENDS - 1 ? " or " : ", ";
    used += (size_t)snprintf(buf + used, len - used, "%s\"%s\"", sep, backends[i]->name);
  }
}

/* Under lock: KILN_OK and the backend set, or an error in err. */
static int select_locked(const char *name, const char *source, char *err, size_t errlen) {
  for (int i = 0; i < N_BACKENDS; i++) {
    if (strcmp(name, backends[i]->name) != 0) continue;
    int st = backends[i]->probe(err, errlen);
    if (st == KILN_OK) __atomic_store_n(&selected, backends[i], __ATOMIC_RELAXED);
    return st;
  }
  char names[128];
  list_names(names, sizeof names);
  snprintf(err, errlen, "unknown backend \"%s\"%s (expected %s)", name, source, names);
  return KILN_ERR_ARG;
}

int rt_backend_select(const char *name, char *err, size_t errlen) {
  pthread_mutex_lock(&lock);
  int st = select_locked(name, "", err, errlen);
  pthread_mutex_unlock(&lock);
  return st;
}

int rt_backend_ready(char *err, size_t errlen) {
  if (__atomic_load_n(&selected, __ATOMIC_RELAXED)) return KILN_OK;
  pthread_mutex_lock(&lock);
  int st = KILN_OK;
  if (!selected) {
    const char *env = getenv("KILN_BACKEND");
    if (!env || !*env) __atomic_store_n(&selected, &rt_backend_llvm, __ATOMIC_RELAXED);
    else st = select_locked(env, " in KILN_BACKEND", err, errlen);
    if (st != KILN_OK && strncmp(env, "cuda", 4) == 0 && strlen(err) < errlen)
      snprintf(err + strlen(err), errlen - strlen(err), " (KILN_BACKEND=%s)", env);
  }
  pthread_mutex_unlock(&lock);
  return st;
}

const rt_backend *rt_backend_selected(void) {
  const rt_backend *b = __atomic_load_n(&selected, __ATOMIC_RELAXED);
  return b ? b : &rt_backend_llvm;
}

/* KILN_CPU buffers are host memory whatever the selection; KILN_CUDA ones
 * the emulated device's under cuda-emu, else the real device's. */
const rt_backend *rt_backend_of(kiln_device device) {
  if (device == KILN_CPU) return &rt_backend_llvm;
  return rt_backend_selected() == &rt_backend_emu ? &rt_backend_emu : &rt_backend_cuda;
}

/* The one rule for which backend runs a node (backend.h). */
const rt_backend *rt_backend_for(const graph_node *n) {
  const rt_backend *s = rt_backend_selected();
  return s == &rt_backend_emu ? s : rt_backend_of(n->device);
}

const rt_backend *rt_buffer_backend(const graph_buffer *b) {
  for (int i = 0; i < N_BACKENDS; i++)
    if (backends[i]->owns(b)) return backends[i];
  return rt_backend_of(b->device);
}

void rt_backend_reset(void) {
  pthread_mutex_lock(&lock);
  __atomic_store_n(&selected, NULL, __ATOMIC_RELAXED);
  pthread_mutex_unlock(&lock);
}
