/*
 * cuda_dl.c — resolving the entry points of a dlopen'ed CUDA library into
 * a struct of function pointers (cuda_dl.h).
 */
#include <dlfcn.h>
#include <string.h>

#include "cuda_dl.h"

const char *cuda_dl_resolve(void *h, const cuda_dl_sym *syms, size_t n, void *api) {
  for (size_t i = 0; i < n; i++) {
    void *f = dlsym(h, syms[i].name);
    if (!f) return syms[i].name;
    memcpy((char *)api + syms[i].offset, &f, sizeof f); /* object ↔ function pointer, as dlsym requires */
  }
  return NULL;
}
