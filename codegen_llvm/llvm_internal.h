/*
 * llvm_internal.h — what the two halves of the CPU backend share:
 * llvm_lower.c (kernel IR → LLVM IR) and llvm_jit.c (ORC LLJIT, locking,
 * host target). Internal to codegen_llvm/.
 */
#ifndef KILN_LLVM_INTERNAL_H
#define KILN_LLVM_INTERNAL_H

#include <stddef.h>

#include <llvm-c/Core.h>

#include "kir.h"

/** Adds to `mod` (whose context is used) the function
 *    void @fname(ptr noalias readonly %bufs, i64 %start, i64 %end)
 *  computing kernel k, which must have passed kir_verify. Returns the
 *  function, or NULL with a message in err. Touches only `mod` and its
 *  context, so threads may lower into different contexts concurrently. */
LLVMValueRef llvm_lower_kernel(const kir_kernel *k, LLVMModuleRef mod, const char *fname, char *err,
                               size_t errlen);

#endif /* KILN_LLVM_INTERNAL_H */
