/*
 * cuda_dl.h — what the dlopen'ed CUDA libraries share: resolving a table
 * of entry points into a struct of function pointers. Used by libnvrtc's
 * loader here (cuda_nvrtc.c) and by the runtime's loaders of libcuda and
 * libcublas (runtime/cuda_driver.c, runtime/cuda_blas.c), which sit above
 * codegen_cuda/ and may include it; internal to those two layers.
 */
#ifndef KILN_CUDA_DL_H
#define KILN_CUDA_DL_H

#include <stddef.h>

/** One entry point: its exported name and the offset of the function
 *  pointer it fills in the caller's API struct. */
typedef struct cuda_dl_sym {
  const char *name;
  size_t offset;
} cuda_dl_sym;

/** Looks up syms [n] in the library handle h and stores each address in
 *  the field at its offset of *api. Returns NULL, or the name of the first
 *  missing symbol (api then partly filled: do not use it). */
const char *cuda_dl_resolve(void *h, const cuda_dl_sym *syms, size_t n, void *api);

#endif /* KILN_CUDA_DL_H */
