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
/** llvm_compile, with the code's symbol named `sym` (NULL: a fresh unique
 *  name) and, when obj_bytes is non-NULL, a malloc'ed copy of the object
 *  file in *obj_bytes, *obj_len (the disk cache stores it). A kernel
 *  compiled under a symbol already linked uses the linked code: give the
 *  same symbol only to the same code. */
int llvm_compile_object(const kir_kernel *k, const char *sym, llvm_kernel_fn *out, char **ir_text, void **obj_bytes,
                        size_t *obj_len, char *err, size_t errlen);
/** Links an object file llvm_compile_object made (obj_len bytes, copied)
 *  and returns the entry point `sym` in *out; when sym is linked already,
 *  that code. Not a compile (llvm_compile_count). KILN_ERR_COMPILE when
 *  the object does not link or define sym, message in err. */
int llvm_load_object(const void *obj_bytes, size_t obj_len, const char *sym, llvm_kernel_fn *out, char *err,
                     size_t errlen);
/** What compiled code depends on besides the kernel IR, as text (malloc'ed;
 *  NULL on failure): target triple, host CPU and its features, the LLVM
 *  version, the vector width. KILN_CACHE_TEST_CPU replaces CPU and
 *  features (for tests). */
char *llvm_target_id(void);
/** Kernels llvm_compile has compiled and linked since the process started
 *  (failed compiles not counted; llvm_shutdown does not reset it). Each
 *  successful call compiles anew: caching is the runtime's (rt_kernel_get).
 *  For tests. */
unsigned long long llvm_compile_count(void);
/** Frees the JIT and all compiled code (for leak-free test exits). */
void llvm_shutdown(void);

#endif /* KILN_LLVM_BACKEND_H */
