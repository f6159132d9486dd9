/*
 * cuda_backend.h — GPU code generation: kernel IR → CUDA C
 * (cuda_print.c), compiled by NVRTC loaded with dlopen at run time
 * (cuda_nvrtc.c), a checker that confirms the result is accepted by the
 * toolchain (cuda_check.c), and the cuda-emu host build of that CUDA C
 * (cuda_emu.c). Nothing links against CUDA: without a toolkit the printer
 * still works and the compile calls return KILN_ERR_DEVICE ("NVRTC not
 * available: ..."). Internal.
 *
 * The launch rule here (cuda_kernel_launch_rule) is the one every
 * launcher uses: runtime/cuda_launch.c on a device, runtime/cuda_emu_run.c
 * under cuda-emu. Running kernels is the runtime's: the driver API
 * (libcuda, also loaded with dlopen) and the device probe are in
 * runtime/cuda_driver.h; buffers, copies and launches on device 0 in
 * runtime/cuda_launch.h; cuBLAS for matmuls in runtime/cuda_blas.h.
 */
#ifndef KILN_CUDA_BACKEND_H
#define KILN_CUDA_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kir.h"

/* ------------------------------------------------------------ printer */

/** CUDA C source of kernel k (which must pass kir_verify) as
 *    extern "C" __global__ void fname(T0 *p0, const T1 *p1, ...,
 *                                     long long start, long long end)
 *  one typed pointer per PARAM (const unless written), then the bounds of
 *  the parallel range. Launch it in the shape of cuda_kernel_launch_rule
 *  (a cooperative kernel needs blockDim.x a multiple of 32, at most 1024).
 *  fname NULL uses k->name; either is sanitised into
 *  an identifier. Returns KILN_OK and a malloc'ed string in *out (the
 *  caller frees), or KILN_ERR_OOM / KILN_ERR_UNSUPPORTED with a message. */
int cuda_print_kernel(const kir_kernel *k, const char *fname, char **out, char *err, size_t errlen);

/** The helpers kiln_fmax and kiln_fmin (float and double) as CUDA C:
 *  MAX and MIN as every printed kernel computes them (NaN propagates,
 *  -0 < +0). A static string. */
const char *cuda_float_minmax(void);

/** True when every store of k lies inside its first parallel range and no
 *  accumulator is carried across it (kir_splittable): chunks of that range
 *  may run as separate launches. */
bool cuda_kernel_splittable(const kir_kernel *k);

/* ------------------------------------------------------- launch shape */

/** How a printed kernel must be launched (cuda_coop.c). The printer and
 *  every launcher (runtime/cuda_launch.c on a device, the emulator) use
 *  this rule, so they run the same grid:
 *   ONE_THREAD      not splittable, no cooperative reduction: thread 0 of
 *                   block 0 runs it all (other threads return at once);
 *   GRID_STRIDE     splittable, no reduction to share: 256 threads a
 *                   block, one block per 256 indices of [start, end), at
 *                   most 65,535 blocks (the grid-stride loop covers more);
 *   GRID_STRIDE_VEC the same for a kernel in the vector form (cuda_vec.h),
 *                   whose threads take 4 indices a step: one block per
 *                   1,024 indices;
 *   BLOCK_PER_INDEX splittable with a reduction of at least 16 elements
 *                   per output (cuda_coop.c): one block per index of
 *                   [start, end) (at most 65,535, blocks step by gridDim.x)
 *                   of `block` threads that share each reduction;
 *   ONE_BLOCK       no parallel range, a reduction of at least 16
 *                   elements (a whole-tensor reduction): block 0
 *                   of `block` threads shares the work; grid 1.
 *  `block` is 32 (one warp) when the longest reduction has at most 64
 *  elements, 128 up to 512, else 256. Cooperative kernels use a static
 *  __shared__ array of 32 long longs (256 bytes) and need blockDim.x a
 *  multiple of 32, at most 1024. */
typedef enum cuda_launch_kind {
  CUDA_LAUNCH_ONE_THREAD,
  CUDA_LAUNCH_GRID_STRIDE,
  CUDA_LAUNCH_BLOCK_PER_INDEX,
  CUDA_LAUNCH_ONE_BLOCK,
  CUDA_LAUNCH_GRID_STRIDE_VEC,
} cuda_launch_kind;

typedef struct cuda_launch_rule {
  cuda_launch_kind kind;
  int64_t extent; /* of the parallel range; 0 when there is none */
  unsigned block; /* threads per block */
} cuda_launch_rule;

typedef struct cuda_launch_shape {
  unsigned grid, block; /* blocks and threads per block (x only) */
  size_t shared_bytes;  /* dynamic shared memory: always 0 (static only) */
} cuda_launch_shape;

/** The rule of k (which must pass kir_verify): KILN_OK, or KILN_ERR_OOM
 *  (the rule is then ONE_THREAD). */
int cuda_kernel_launch_rule(const kir_kernel *k, cuda_launch_rule *r);
/** The launch over [start, end) of the parallel range under rule r. */
void cuda_launch_rule_shape(const cuda_launch_rule *r, int64_t start, int64_t end, cuda_launch_shape *out);
/** Both at once: cuda_kernel_launch_rule then cuda_launch_rule_shape. */
int cuda_kernel_launch_shape(const kir_kernel *k, int64_t start, int64_t end, cuda_launch_shape *out);

/* ------------------------------------------- tiled GEMM (cuda_gemm.c) */

/** Threads of a tiled GEMM block (each computes 4 × 4 outputs of a 64 ×
 *  64 tile of C). */
#define CUDA_GEMM_THREADS 256

/** Most elementwise steps a tiled GEMM applies to C before its store. */
#define CUDA_GEMM_EPI_MAX 4

/** An epilogue step's operation on acc (C's value so far) and x (its
 *  operand): as the kernels compute ADD, SUB, MUL, DIV (RSUB, RDIV: the
 *  operand on the left), RELU, MAXIMUM and MINIMUM (NaN propagates,
 *  -0 < +0), one rounding each in the element type. */
enum {
  CUDA_GEMM_EPI_ADD = 1,
  CUDA_GEMM_EPI_SUB,  /* acc - x */
  CUDA_GEMM_EPI_RSUB, /* x - acc */
  CUDA_GEMM_EPI_MUL,
  CUDA_GEMM_EPI_DIV,  /* acc / x */
  CUDA_GEMM_EPI_RDIV, /* x / acc */
  CUDA_GEMM_EPI_RELU, /* max(acc, 0), no operand */
  CUDA_GEMM_EPI_MAXIMUM,
  CUDA_GEMM_EPI_MINIMUM,
};

/** Where a step's operand comes from. */
enum {
  CUDA_GEMM_OPND_NONE = 0, /* RELU */
  CUDA_GEMM_OPND_VALUE,    /* a fill value (value), the same everywhere */
  CUDA_GEMM_OPND_BUFFER,   /* element (i, j) of batch bt at E[off + bt·sb + i·sm + j·sn] */
};

/** One epilogue step of a tiled GEMM (the kernel's buffer E for a
 *  BUFFER operand is the launch's parameter after P, one per step). */
typedef struct cuda_gemm_epi_step {
  unsigned char op, operand;
  int64_t off, sb, sm, sn; /* BUFFER: elements, all >= 0 */
  double value;            /* VALUE: converted to the element type */
} cuda_gemm_epi_step;

/** One product for the tiled GEMM: for each batch bt < batch, C = A·B
 *  with A [m, k], B [k, n], C [m, n] (F32, or F64 when f64), element
 *  (i, j) of each at off + bt·(its batch stride) + i·(row stride) +
 *  j·(column stride), strides in elements, all >= 0 (a broadcast batch:
 *  stride 0). k may be 0 (C = 0). With n_epi steps, each element of C
 *  is stored as epi[n_epi - 1](... epi[0](A·B)): the product's fused
 *  epilogue (bias, activation, scale, residual). */
typedef struct cuda_gemm_spec {
  bool f64;
  int64_t batch, m, n, k;
  int64_t a_off, a_b, a_m, a_k;
  int64_t b_off, b_b, b_k, b_n;
  int64_t c_off, c_b, c_m, c_n;
  int n_epi;
  cuda_gemm_epi_step epi[CUDA_GEMM_EPI_MAX];
} cuda_gemm_spec;

/** What a tiled GEMM kernel is specialised for: the element type, for
 *  each operand whether its staging loop steps along k (its k stride is
 *  1 and its other stride is not) for coalesced loads, and the epilogue's
 *  steps (operation and operand kind; the operands' places and values
 *  are parameters). */
typedef struct cuda_gemm_variant {
  bool f64, a_along_k, b_along_k;
  int n_epi;
  unsigned char epi_op[CUDA_GEMM_EPI_MAX], epi_operand[CUDA_GEMM_EPI_MAX];
} cuda_gemm_variant;

/** Entries of a tiled GEMM's parameter array (cuda_gemm_params): the
 *  product's 17, then 4 per epilogue step. */
#define CUDA_GEMM_NPARAMS (17 + 4 * CUDA_GEMM_EPI_MAX)

/** True when s is a product the kernels run: batch, m and n at least 1,
 *  k at least 0, no negative stride or offset, at most CUDA_GEMM_EPI_MAX
 *  epilogue steps of known operations, each with the operand its
 *  operation takes (none for RELU). */
bool cuda_gemm_spec_ok(const cuda_gemm_spec *s);
/** The variant that runs s. */
cuda_gemm_variant cuda_gemm_variant_of(const cuda_gemm_spec *s);
/** The kernel of variant v as CUDA C, named fname (NULL: "kiln_gemm"),
 *  with the parameters (A, B, C, P, E0 ... E(n_epi - 1), long long
 *  start, long long end) of a printed kernel in the BLOCK_PER_INDEX
 *  form: P the parameter array of a product (cuda_gemm_params, in the
 *  kernel's memory space), E<s> step s's operand buffer (unused unless a
 *  BUFFER operand: may be null), the indices [start, end) its tiles
 *  (cuda_gemm_tiles). *out is malloc'ed (caller frees). KILN_ERR_OOM;
 *  KILN_ERR_ARG for steps cuda_gemm_spec_ok refuses.
 *  The runtime runs matrix products of CUDA tensors through it where
 *  cuBLAS is absent, and under cuda-emu (runtime/cuda_gemm_run.c). */
int cuda_gemm_print(cuda_gemm_variant v, const char *fname, char **out, char *err, size_t errlen);
/** Parameters (buffers) of variant v's kernel before start and end:
 *  4 + v.n_epi. */
int cuda_gemm_n_buffers(cuda_gemm_variant v);
/** The parameter array of s for its variant's kernel. KILN_ERR_ARG (err
 *  set) unless cuda_gemm_spec_ok(s). */
int cuda_gemm_params(const cuda_gemm_spec *s, int64_t p[CUDA_GEMM_NPARAMS], char *err, size_t errlen);
/** The 64 × 64 tiles of C over every batch: the launch's extent. */
int64_t cuda_gemm_tiles(const cuda_gemm_spec *s);
/** The launch rule of every tiled GEMM kernel: BLOCK_PER_INDEX, blocks
 *  of CUDA_GEMM_THREADS, no extent of its own (a product launches over
 *  [0, cuda_gemm_tiles)). */
void cuda_gemm_launch_rule(cuda_launch_rule *r);

/* -------------------------------------------------------------- NVRTC */

/** True when NVRTC can be loaded (loads it on first use). On false, err
 *  (if non-NULL) says what was tried. Thread-safe. */
bool cuda_nvrtc_available(char *err, size_t errlen);

/** NVRTC's version (e.g. 13, 0) or KILN_ERR_DEVICE when unavailable. */
int cuda_nvrtc_version(int *major, int *minor);

/** Compiles CUDA C `src` (program name `name`) for `arch`:
 *    "sm_XX"      → CUBIN (nvrtcGetCUBIN: NVRTC runs the assembler);
 *    "compute_XX" → PTX (nvrtcGetPTX), NUL-terminated.
 *  On success *out is a malloc'ed image (caller frees) of *out_len bytes.
 *  Errors: KILN_ERR_DEVICE ("NVRTC not available: ..."), KILN_ERR_COMPILE
 *  (the message ends with NVRTC's compile log), KILN_ERR_ARG (bad arch),
 *  KILN_ERR_OOM. Thread-safe. */
int cuda_nvrtc_compile(const char *src, const char *name, const char *arch, char **out, size_t *out_len, char *err,
                       size_t errlen);

/** The target NVRTC should compile for on a device of compute capability
 *  cc_major.cc_minor, in arch (e.g. 32 bytes): "sm_XX" (a CUBIN) when
 *  NVRTC lists that architecture (nvrtcGetSupportedArchs; an NVRTC
 *  without the list is assumed to know it), else "compute_YY" for the
 *  highest listed YY <= XX — PTX, which the driver JIT-compiles for the
 *  device (a GPU newer than the NVRTC). KILN_ERR_DEVICE without NVRTC,
 *  KILN_ERR_UNSUPPORTED when every listed arch is newer than the device. */
int cuda_nvrtc_target(int cc_major, int cc_minor, char *arch, size_t len, char *err, size_t errlen);

/** For tests: replaces the library names tried by dlopen with `names`
 *  (NULL-terminated; the array must outlive its use) and unloads NVRTC,
 *  so the next call loads again; NULL restores the default list
 *  (libnvrtc.so.13, .so.12, .so, each also under /usr/local/cuda/lib64
 *  and /usr/local/cuda/targets/x86_64-linux/lib; or only KILN_NVRTC_LIB
 *  when that is set). Not thread-safe with concurrent compiles. */
void cuda_nvrtc_set_search_list(const char *const *names);

/** Forgets the loaded NVRTC (the library stays mapped: see cuda_nvrtc.c);
 *  the next call loads it again. */
void cuda_nvrtc_shutdown(void);

/* ------------------------------------------------------------ checker */

/** Prints k, compiles it with NVRTC for `arch` and, for a PTX arch
 *  ("compute_XX"), runs ptxas (/usr/local/cuda/bin/ptxas, else `ptxas`
 *  on PATH) for sm_XX on the PTX. Returns KILN_OK when the toolchain
 *  accepts the kernel, else a negative kiln_status with a message naming
 *  the kernel and stage (the compile log or ptxas's output included).
 *  Thread-safe. */
int cuda_check_kernel(const kir_kernel *k, const char *arch, char *err, size_t errlen);
/** The same for CUDA C source text src (`name` for messages). */
int cuda_check_source(const char *src, const char *name, const char *arch, char *err, size_t errlen);

/* ----------------------------------------------- cuda-emu (cuda_emu.c) */

/** An emulated kernel: the CPU backend's calling convention. */
typedef void (*cuda_emu_fn)(void *const *bufs, int64_t start, int64_t end);

/* What the host build of a kernel calls to run a launch: the ABI between
 * the printed entry point (and the emulation header in cuda_emu.c, which
 * declares the same layout) and the launcher that runs emulated blocks
 * (the runtime's, runtime/cuda_emu_run.c; the caller of cuda_emu_compile
 * passes it). */

/* One CUDA thread of the kernel: sets blockIdx.x = b, threadIdx.x = t,
 * gridDim.x = grid, blockDim.x = block and runs the kernel body with the
 * launch's arguments (ctx). */
typedef void (*cuda_emu_thread_fn)(void *ctx, unsigned b, unsigned t, unsigned grid, unsigned block);

typedef struct cuda_emu_api {
  /* Runs the launch of rule (kind, extent, block) over [start, end):
   * cuda_launch_rule_shape's grid and block; GRID_STRIDE(_VEC) and ONE_THREAD
   * kernels thread after thread as plain calls, BLOCK_PER_INDEX and
   * ONE_BLOCK kernels block after block with fibers. */
  void (*launch)(int kind, long long extent, unsigned block, long long start, long long end, cuda_emu_thread_fn fn,
                 void *ctx);
  /* __syncthreads(): the calling fiber waits until every thread of its
   * block arrived. */
  void (*sync)(void);
  /* A warp shuffle: the calling lane offers `bits` and receives those of
   * lane src_lane (0..31) of its warp, once every lane of the warp
   * arrived; mask must name every lane of the warp. */
  unsigned long long (*shfl)(unsigned mask, unsigned long long bits, unsigned src_lane);
} cuda_emu_api;

typedef struct cuda_emu_stats {
  int64_t kernels;        /* kernels handled */
  int64_t checks;         /* toolchain checks (2 per kernel: sm_80, compute_90 + ptxas
                             sm_90) */
  int64_t failures;       /* checks that failed */
  int64_t host_compiles;  /* kernels built by the host C++ compiler */
  int64_t half_fallbacks; /* F16/BF16 kernels left to the LLVM path */
  int64_t cooperative;    /* host-compiled kernels whose blocks share reductions
                             (launch rule BLOCK_PER_INDEX or ONE_BLOCK) */
} cuda_emu_stats;

/** True when cuda-emu can run: NVRTC loads and a host C++ compiler is
 *  found. On false, err (if non-NULL) says what is missing. */
bool cuda_emu_available(char *err, size_t errlen);

/** The cuda-emu build of k: printed as CUDA C, checked with
 *  cuda_check_source for sm_80 and compute_90 (+ ptxas sm_90), then the
 *  same text compiled for the host with the emulation header and
 *  loaded, its launches going to `launcher` (which must outlive the
 *  build: the runtime's rt_cuda_emu_launcher). KILN_OK with *fn set, or
 *  with *fn NULL for a kernel that uses F16/BF16 (checked, to be run by
 *  the LLVM path). Errors: KILN_ERR_COMPILE
 *  (a toolchain or host compile failure, its log in err), KILN_ERR_DEVICE
 *  (no NVRTC), KILN_ERR_UNSUPPORTED (no host compiler), KILN_ERR_IO. Not
 *  cached here: the runtime's kernel cache keeps the result. Thread-safe. */
int cuda_emu_compile(const kir_kernel *k, const cuda_emu_api *launcher, cuda_emu_fn *fn, char *err, size_t errlen);

/** The cuda-emu build of a kernel given as source: src defines
 *  kiln_emu_kernel(n_params pointers, long long start, long long end) as
 *  cuda_print_kernel's kernels do (cuda_gemm_print with that name), run
 *  under `rule` (its extent and block: fixed in the build). Checked and built as cuda_emu_compile does (counted in
 *  its stats), with its errors. */
int cuda_emu_compile_source(const char *name, const char *src, int n_params, const cuda_launch_rule *rule,
                            const cuda_emu_api *launcher, cuda_emu_fn *fn, char *err, size_t errlen);

/** Counters since the start of the process. */
void cuda_emu_get_stats(cuda_emu_stats *out);

#endif /* KILN_CUDA_BACKEND_H */
