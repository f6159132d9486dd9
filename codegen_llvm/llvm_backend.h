/*
 * llvm_backend.h — CPU backend: kernel IR → LLVM IR → ORC LLJIT machine
 * code for the target CPU: the host (its name and features), or the CPU
 * env KILN_CPU names (llvm_target.c); and the GEMM micro-kernels the
 * runtime's contraction driver (runtime/gemm.c) calls. Internal.
 */
#ifndef KILN_LLVM_BACKEND_H
#define KILN_LLVM_BACKEND_H

#include <stdbool.h>
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
/** k compiled as llvm_compile would compile it, as assembly text in
 *  *asm_text (malloc'ed, NUL-terminated; the caller frees); nothing is
 *  linked. Errors as llvm_compile's. For tests and debugging. */
int llvm_compile_asm(const kir_kernel *k, char **asm_text, char *err, size_t errlen);
/** What compiled code depends on besides the kernel IR, as text (malloc'ed;
 *  NULL on failure, e.g. an unknown KILN_CPU): target triple, the target
 *  CPU (KILN_CPU, else the host's) and its features (empty for a pinned
 *  CPU: the ones its name implies), the LLVM version, the vector width.
 *  KILN_CACHE_TEST_CPU replaces CPU and features (for tests). */
char *llvm_target_id(void);

/* The target CPU (llvm_target.c): env KILN_CPU, read once — unset, empty
 * or "native": the host; else a CPU name LLVM knows (x86-64, x86-64-v2,
 * x86-64-v3, x86-64-v4, haswell, znver4, ...), whose implied features
 * are compiled for. Code that chooses a kernel's shape by the machine
 * (register blocking) asks these, never the host's cpuid, so it follows
 * the pin. */
/** Width in bits of the target's widest vector register: 512 (AVX-512),
 *  256 (AVX, AVX2), 128 (SSE, NEON); 0 when the target is unusable
 *  (llvm_target_error). Probed once (llvm_target.c). KILN_VECTOR_BITS
 *  does not change it: that only steers the loop vectoriser. */
int llvm_target_vector_bits(void);
/** Vector registers of the target: 32 on x86-64 with AVX-512, 16 with
 *  AVX2 or SSE; 32 on AArch64; 0 when the target is unusable. */
int llvm_target_vector_regs(void);
/** The target CPU's name (borrowed, lives for the process): KILN_CPU's
 *  value, or the host's name; NULL when the target is unusable. */
const char *llvm_target_cpu(void);
/** Why no kernel can be compiled (borrowed), e.g. "KILN_CPU=foo: LLVM
 *  does not know this CPU for x86_64-pc-linux-gnu (...)"; NULL when the
 *  target is usable. */
const char *llvm_target_error(void);
/** Kernels llvm_compile has compiled and linked since the process started
 *  (failed compiles not counted; llvm_shutdown does not reset it). Each
 *  successful call compiles anew: caching is the runtime's (rt_kernel_get).
 *  For tests. */
unsigned long long llvm_compile_count(void);
/* ---------------------------------- the GEMM micro-kernel (llvm_gemm.c) */

/** Flags of a micro-kernel call. */
#define LLVM_GEMM_ACCUMULATE 1 /* C += A·B (beta 1: a later KC block); else C = A·B (beta 0) */
#define LLVM_GEMM_LAST 2       /* the last KC block: the epilogue (when there is one) applies */
/* Streaming stores: C's tile is stored with nontemporal stores, which
 * bypass the caches (no read of the lines first), and not prefetched.
 * The caller guarantees c and ldc·T are multiples of the vector size,
 * and fences (a seq_cst fence) before another thread reads C. */
#define LLVM_GEMM_STREAM 4
/** Largest tile a micro-kernel computes (the driver's edge tile). */
#define LLVM_GEMM_MAX_MR 16
#define LLVM_GEMM_MAX_NR 64

/** Most steps of a fused epilogue (llvm_gemm_spec.epi). */
#define LLVM_GEMM_EPI_MAX 4

/** One step of a fused epilogue: acc = op(acc, operand), or acc =
 *  op(operand, acc) for the R (reversed) ops; RELU takes no operand
 *  (llvm.maximum(acc, 0), as the kernels' RELU: NaN propagates); MAXIMUM and
 *  MINIMUM are llvm.maximum / llvm.minimum with the operand (the kernels'
 *  MAXIMUM, MINIMUM and CLAMP's bounds). */
typedef enum llvm_gemm_epi_op {
  LLVM_GEMM_EPI_ADD = 1,
  LLVM_GEMM_EPI_SUB,  /* acc - x */
  LLVM_GEMM_EPI_RSUB, /* x - acc */
  LLVM_GEMM_EPI_MUL,
  LLVM_GEMM_EPI_DIV,  /* acc / x */
  LLVM_GEMM_EPI_RDIV, /* x / acc */
  LLVM_GEMM_EPI_RELU,
  LLVM_GEMM_EPI_MAXIMUM,
  LLVM_GEMM_EPI_MINIMUM,
} llvm_gemm_epi_op;

/** Where a step's operand varies over the tile (llvm_gemm_epi_args gives
 *  its address at the tile's [0, 0] and ld). */
typedef enum llvm_gemm_epi_arg {
  LLVM_GEMM_ARG_NONE = 0, /* RELU */
  LLVM_GEMM_ARG_ROW,      /* along N: NR contiguous elements, the same for every row (a bias [N]) */
  LLVM_GEMM_ARG_COL,      /* along M: MR elements ld apart, the same along a row (a bias [M, 1]) */
  LLVM_GEMM_ARG_TILE,     /* MR rows of NR contiguous elements, rows ld apart (a residual) */
  LLVM_GEMM_ARG_SCALAR,   /* one element (a scale) */
} llvm_gemm_epi_arg;

typedef struct llvm_gemm_epi_step {
  unsigned char op, arg; /* llvm_gemm_epi_op, llvm_gemm_epi_arg */
} llvm_gemm_epi_step;

/** The operands of one call's epilogue, per step: the element of the
 *  operand at the tile's [0, 0] (type T) and its stride in elements
 *  (TILE: between rows; COL: between elements). Read only on the last
 *  KC block. */
typedef struct llvm_gemm_epi_args {
  const void *ptr[LLVM_GEMM_EPI_MAX];
  int64_t ld[LLVM_GEMM_EPI_MAX];
} llvm_gemm_epi_args;

/** A compiled micro-kernel: the tile C [MR, NR] of dtype T (row stride
 *  ldc elements, any alignment) gets the product of two packed panels,
 *  a [kc, MR] (the MR elements of A's column k, contiguous, per k) and
 *  b [kc, NR] (the NR elements of B's row k per k; 64-byte aligned, NR·T
 *  a multiple of the vector size) — assigned, or added with
 *  LLVM_GEMM_ACCUMULATE. kc ≥ 0 (0: C = 0, or C unchanged when
 *  accumulating). Each element sums its kc products in k order, one
 *  fused multiply-add each, from 0 (the tile in registers). With
 *  LLVM_GEMM_LAST, the spec's epilogue steps apply to the sums, in
 *  order, before the store, their operands from ep (NULL when the spec
 *  has no steps). */
typedef void (*llvm_gemm_fn)(int64_t kc, const void *a, const void *b, void *c, int64_t ldc, int64_t flags,
                             const llvm_gemm_epi_args *ep);

/** One micro-kernel variant: the key of the compiled-kernel cache. */
typedef struct llvm_gemm_spec {
  kiln_dtype dtype; /* KILN_F32 or KILN_F64 */
  int vl;           /* lanes of one vector register (512-bit F32: 16) */
  int mr;           /* rows of the tile (A elements broadcast per k) */
  int nv;           /* vectors per row: NR = nv·vl columns */
  int nr;           /* nv·vl */
  bool fma;         /* llvm.fma (native fused multiply-add), else llvm.fmuladd */
  int n_epi;        /* fused epilogue steps (0: none) */
  llvm_gemm_epi_step epi[LLVM_GEMM_EPI_MAX];
} llvm_gemm_spec;

/** The micro-kernel for dtype on the JIT's target: vl from the vector
 *  width, MR×NR from the register count (accumulators MR·nv plus nv B
 *  vectors and a broadcast fit the registers: 14×32 F32 with AVX-512's
 *  32 zmm, 6×16 with AVX2's 16 ymm, 6×8 at 128 bits) unless the target
 *  CPU measured a shorter MR faster (llvm_gemm.c's table: znver4 8×32),
 *  or as llvm_gemm_override says (an override of the width or registers
 *  takes the register rule). KILN_ERR_ARG for another dtype,
 *  KILN_ERR_COMPILE when the JIT cannot start. */
int llvm_gemm_choose(kiln_dtype dtype, llvm_gemm_spec *out, char *err, size_t errlen);
/** llvm_gemm_choose's micro-kernel for a product of m rows (C's M):
 *  another MR, from the register rule's down to 16 accumulators, where
 *  the chosen one would pad the last row tile by more than 2 % of the
 *  rows more (8×32 for M = 64 or 128 on AVX-512, 9×32 for 9 on Zen 4;
 *  AVX2's 6×16 stays). An MR set by llvm_gemm_override wins. Errors as
 *  llvm_gemm_choose. */
int llvm_gemm_choose_rows(kiln_dtype dtype, int64_t m, llvm_gemm_spec *out, char *err, size_t errlen);
/** For tests and tuning: the vector width (bits) and register count
 *  llvm_gemm_choose assumes instead of the host's (0, 0: the host's), and
 *  MR and nv instead of the rule's (0: the rule's). Not thread-safe with
 *  running products: set it between them. */
void llvm_gemm_override(int bits, int regs, int mr, int nv);
/** Compiles s's micro-kernel (valid per llvm_gemm_kernel) into the JIT
 *  as symbol sym (NULL: a unique one; a given one may be linked already,
 *  and that code is used); with obj, *obj and *obj_len receive a malloc'ed
 *  copy of its object file (for a cache on disk). Not cached here:
 *  llvm_gemm_kernel is the cached path. Errors as llvm_gemm_kernel. */
int llvm_gemm_compile(const llvm_gemm_spec *s, const char *sym, llvm_gemm_fn *out, void **obj, size_t *obj_len,
                      char *err, size_t errlen);
#define LLVM_GEMM_KEY_MAX (16 + 7 + 2 * LLVM_GEMM_EPI_MAX)
/** The bytes that identify s's code for a given target (with the
 *  target's identity, a disk cache's key); returns their count. */
size_t llvm_gemm_key(const llvm_gemm_spec *s, unsigned char key[LLVM_GEMM_KEY_MAX]);
/** How llvm_gemm_kernel gets the code of a variant this process has not
 *  built yet: e.g. loaded from where an earlier process kept it, else
 *  compiled with llvm_gemm_compile (*compiled says which). NULL:
 *  llvm_gemm_compile. */
typedef int (*llvm_gemm_builder)(const llvm_gemm_spec *s, llvm_gemm_fn *out, bool *compiled, char *err,
                                 size_t errlen);
/** How llvm_gemm_kernel got a variant: already held by this process,
 *  loaded by the builder (e.g. from a disk cache), or compiled now. */
typedef enum llvm_gemm_got { LLVM_GEMM_HELD, LLVM_GEMM_LOADED, LLVM_GEMM_COMPILED } llvm_gemm_got;
/** The compiled micro-kernel for s (llvm_gemm_choose's, or any with
 *  1 ≤ mr ≤ LLVM_GEMM_MAX_MR, nr ≤ LLVM_GEMM_MAX_NR), built once per
 *  process and variant through `build` (thread-safe; llvm_shutdown
 *  forgets them); *got (when not NULL) says how this call got it.
 *  KILN_ERR_ARG for a bad spec, KILN_ERR_COMPILE / _OOM from the JIT. */
int llvm_gemm_kernel(const llvm_gemm_spec *s, llvm_gemm_builder build, llvm_gemm_fn *out, llvm_gemm_got *got,
                     char *err, size_t errlen);
/** Micro-kernels compiled so far in this process (for tests; not those
 *  a builder loaded). */
int llvm_gemm_compiled(void);

/** Frees the JIT and all compiled code (for leak-free test exits). */
void llvm_shutdown(void);

#endif /* KILN_LLVM_BACKEND_H */
