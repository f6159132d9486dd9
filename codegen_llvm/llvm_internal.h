/*
 * llvm_internal.h — what the parts of the CPU backend share:
 * llvm_lower.c (kernel IR → LLVM IR), llvm_math.c (inline F32 math) and
 * llvm_jit.c (ORC LLJIT, locking, host target). Internal to codegen_llvm/.
 */
#ifndef KILN_LLVM_INTERNAL_H
#define KILN_LLVM_INTERNAL_H

#include <stdbool.h>
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

/** Emits at b's insertion point a branch-free, vectorisable F32 expansion
 *  of math op `op` applied to a (and c: POW is pow(a, c), ATAN2 is
 *  atan2(a, c)); a and c are float values of mod's context. Covers EXP,
 *  EXP2, EXPM1, LOG, LOG2, LOG1P, TANH, ERF, SIN, COS, TAN, POW, ATAN2 (the
 *  accuracy table is in llvm_math.c); returns NULL for any other op. Sets
 *  *failed if an LLVM intrinsic could not be declared. */
LLVMValueRef llvm_math_f32(LLVMBuilderRef b, LLVMModuleRef mod, kir_op op, LLVMValueRef a, LLVMValueRef c,
                           bool *failed);

/** True when kernels ask for 512-bit vectors (llvm_jit.c: AVX-512 hosts,
 *  or KILN_VECTOR_BITS=512); valid once the host target is set up. */
bool llvm_wide_vectors(void);

/* Streaming stores (llvm_stream.c). */
/** Tags a store lowered from a nontemporal kernel IR STORE. */
void llvm_stream_tag_store(LLVMValueRef store);
/** Emits llvm.assume(true) ["align"(ptr, align)] at b's insertion point;
 *  false when the intrinsic is missing. */
bool llvm_assume_aligned(LLVMBuilderRef b, LLVMModuleRef mod, LLVMValueRef ptr, unsigned align);
/** After optimisation: sets !nontemporal on the tagged vector stores whose
 *  alignment covers their size; returns how many. */
int llvm_stream_mark(LLVMModuleRef mod);

/** The LLVM type of a buffer element of type t (BOOL: i8; BF16: i16). */
LLVMTypeRef llvm_mem_type(LLVMContextRef ctx, kir_type t);

/* Transposed reads of a tile (llvm_tile.c). */
typedef struct llvm_tile_env {
  const kir_kernel *k;
  LLVMContextRef ctx;
  LLVMBuilderRef b;  /* insertion point: before the tile's loops */
  LLVMBuilderRef ab; /* allocas (the entry block) */
  LLVMValueRef *vals; /* per uop lowered so far (PARAM: its buffer) */
} llvm_tile_env;
/** For the tile whose outer RANGE is uop `tile`: emits at e->b the staged
 *  block of every transposed read in its body (see llvm_tile.c) and sets
 *  staged[u] for each such LOAD uop u; returns how many. *load_skew gets
 *  the skew uop the reads' block index takes (llvm_tile_index), or -1. */
int llvm_tile_stage(const llvm_tile_env *e, int tile, LLVMValueRef *staged, int *load_skew);
/** At e->b, inside the tile's outer loop (whose index is ti): tells LLVM
 *  that each nontemporal store of the body starts a vector-aligned row
 *  at tj = 0 (kir.h's promise), so they can stream. False when the
 *  assume intrinsic is missing. */
bool llvm_tile_align_rows(const llvm_tile_env *e, LLVMModuleRef mod, int tile, LLVMValueRef ti);
/** Element index ti * KIR_TILE + tj of a staged block; of a skewed
 *  tile's (skew: the value of its skew uop), ti * 2*KIR_TILE + skew + tj. */
LLVMValueRef llvm_tile_index(LLVMBuilderRef b, LLVMContextRef ctx, LLVMValueRef ti, LLVMValueRef tj, LLVMValueRef skew);
/** The skew uop of the tile whose outer RANGE is `tile` (kir_tile_skew), or -1. */
int llvm_tile_skew(const kir_kernel *k, int tile);

#endif /* KILN_LLVM_INTERNAL_H */
