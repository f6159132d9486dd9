/*
 * exec.c — execution settings: backend selection and thread count.
 * Only the LLVM CPU backend exists in this build; kernels run on the
 * runtime's thread pool (runtime/pool.h), sized here.
 */
#include <string.h>

#include "api_internal.h"
#include "pool.h"

KILN_API int kiln_set_backend(const char *name) {
  if (!name) return api_error(KILN_ERR_ARG, "kiln_set_backend", "name is NULL");
  if (strcmp(name, "llvm") == 0) return KILN_OK;
  if (strcmp(name, "cuda") == 0)
    return api_error(KILN_ERR_DEVICE, "kiln_set_backend", "no CUDA device: the CUDA backend is not built");
  return api_error(KILN_ERR_ARG, "kiln_set_backend", "unknown backend \"%s\" (expected \"llvm\" or \"cuda\")", name);
}

KILN_API int kiln_set_num_threads(int n) {
  if (n < 1) return api_error(KILN_ERR_ARG, "kiln_set_num_threads", "thread count %d must be at least 1", n);
  rt_pool_set_threads(n);
  return KILN_OK;
}
