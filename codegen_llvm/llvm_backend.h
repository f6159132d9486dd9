/*
 * llvm_backend.h — CPU backend: kernel IR → LLVM IR → ORC LLJIT machine
 * code for the host CPU (its name and features). Internal.
 */
#ifndef KILN_LLVM_BACKEND_H
#define KILN_LLVM_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "kir.h"

typedef void (*llvm_kernel_fn)(void *const *bufs, int64_t start, int64_t end);

/** Compiles k and returns its entry point in *out. Thread-safe (one lock
 *  around the JIT). The code lives until llvm_shutdown. On failure returns
 *  KILN_ERR_COMPILE (or KILN_ERR_OOM) and writes a message to err. When
 *  ir_text is non-NULL it receives the optimised LLVM IR (malloc'ed; the
 *  caller frees), for KILN_DEBUG=4. */
int llvm_compile(const kir_kernel *k, llvm_kernel_fn *out, char **ir_text, char *err, size_t errlen);
/** Kernels llvm_compile has compiled and linked since the process started
 *  (failed compiles not counted; llvm_shutdown does not reset it). Each
 *  successful call compiles anew: caching is the runtime's (rt_kernel_get).
 *  For tests. */
unsigned long long llvm_compile_count(void);
/** Frees the JIT and all compiled code (for leak-free test exits). */
void llvm_shutdown(void);

#endif /* KILN_LLVM_BACKEND_H */
