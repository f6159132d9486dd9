/*
 * exec.c — execution settings: backend selection and thread count; the
 * CPU kernels are compiled for (KILN_CPU).
 * The choice of backend lives in the runtime (runtime/backend.c); CPU
 * kernels run on the runtime's thread pool (runtime/pool.h), sized here.
 */
#include <string.h>

#include "api_internal.h"
#include "runtime.h"

KILN_API int kiln_set_backend(const char *name) {
  if (!name) return api_error(KILN_ERR_ARG, "kiln_set_backend", "name is NULL");
  char err[1200];
  int st = rt_backend_select(name, err, sizeof err);
  return st == KILN_OK ? KILN_OK : api_error((kiln_status)st, "kiln_set_backend", "%s", err);
}

KILN_API int kiln_cpu_target(char *cpu, size_t cpu_len, int *vector_bits, int *vector_regs) {
  char err[400];
  int st = rt_cpu_target(cpu, cpu_len, vector_bits, vector_regs, err, sizeof err);
  return st == KILN_OK ? KILN_OK : api_error((kiln_status)st, "kiln_cpu_target", "%s", err);
}

KILN_API int kiln_set_num_threads(int n) {
  if (n < 1) return api_error(KILN_ERR_ARG, "kiln_set_num_threads", "thread count %d must be at least 1", n);
  rt_pool_set_threads(n);
  return KILN_OK;
}
