/*
 * llvm_internal.h — what the parts of the CPU backend share:
 * llvm_lower.c (kernel IR → LLVM IR), llvm_math.c (inline F32 math),
 * llvm_jit.c (ORC LLJIT, locking) and llvm_target.c (the target CPU).
 * Internal to codegen_llvm/.
 */
#ifndef KILN_LLVM_INTERNAL_H
#define KILN_LLVM_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include <llvm-c/Core.h>
#include <llvm-c/TargetMachine.h>

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

/** Fills `mod` (its context is mod's) with the function `sym` a caller
 *  compiles through llvm_compile_module; false with a message in err. */
typedef bool (*llvm_module_fill)(LLVMModuleRef mod, const char *sym, void *ctx, char *err, size_t errlen);
/** Compiles a module that `fill` builds through the kernels' path (a
 *  fresh context, the O2 pipeline for the target, an object file linked
 *  into the JIT under jit_lock; llvm_jit.c) and returns the address of
 *  its function in *out (cast it to its type). `name` names it in
 *  messages; `sym` is its symbol (NULL: a unique one made from name; a
 *  given one — the disk cache's — may be linked already, and that code
 *  is used). With obj_bytes, *obj_bytes and *obj_len receive a malloc'ed
 *  copy of the object file (for the disk cache). Thread-safe; code lives
 *  until llvm_shutdown. KILN_ERR_COMPILE or KILN_ERR_OOM, message in err. */
int llvm_compile_module(const char *name, llvm_module_fill fill, void *ctx, const char *sym, void **out,
                        void **obj_bytes, size_t *obj_len, char *err, size_t errlen);
/** Forgets the compiled GEMM micro-kernels (llvm_gemm.c), at
 *  llvm_shutdown, which frees their code. */
void llvm_gemm_forget(void);

/* The target (llvm_target.c). */
/** The CPU kernels are compiled for (KILN_CPU, else the host) and what it
 *  can do; resolved once per process, never freed. */
typedef struct llvm_target_info {
  bool ok;        /* false: no kernel can be compiled; err says why */
  bool pinned;    /* KILN_CPU named a CPU (not the host) */
  char err[320];
  LLVMTargetRef target;
  char *triple, *cpu, *features; /* features "" when pinned: the CPU's own */
  int vector_bits, vector_regs;  /* widest vector register; how many */
} llvm_target_info;
/** The target, resolved on the first call (KILN_CPU read, the probe run:
 *  llvm_target.c). Never NULL; check ->ok. */
const llvm_target_info *llvm_target(void);
/** A new TargetMachine for t (PIC, small code model, opt level
 *  aggressive); the caller disposes it. NULL on failure. Not shared
 *  between threads (TargetMachines cache subtargets). */
LLVMTargetMachineRef llvm_target_machine(const llvm_target_info *t);
/** True when kernels ask for 512-bit vectors (the target has them, or
 *  KILN_VECTOR_BITS=512); read once. */
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
