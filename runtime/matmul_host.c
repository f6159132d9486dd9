/*
 * matmul_host.c — which host GEMM runs a MATMUL node: the generated one
 * (gemm.c, the LLVM micro-kernel of codegen_llvm/llvm_gemm.c) or OpenBLAS
 * (blas.c). The llvm and cuda-emu backends' `contract` call
 * rt_matmul_host; what ran is remembered per thread for the profiler's
 * record (extern.c: `gemm_MxNxK` for the generated GEMM, backend "llvm";
 * `blas_sgemm_MxNxK`, backend "blas", for OpenBLAS).
 *
 * KILN_GEMM (read once): `jit` forces the generated GEMM, `blas`
 * OpenBLAS; unset, empty or `auto`, the rule below; anything else is
 * auto with one line on stderr.
 *
 * The auto rule (jit_pays) comes from bench/gemm_tune.c on the
 * development machine (AMD EPYC Zen 5, 2 cores, AVX-512; OpenBLAS
 * 0.3.x under OPENBLAS_CORETYPE=Haswell, its AVX2 kernels, split over
 * Kiln's pool as blas.c does; docs/internals.md, "The generated GEMM",
 * has the table): with the 14 × 32 tile the generated GEMM is faster
 * when N ≥ 64 and M ≥ 8 and the product has at least 2^19 multiply-adds
 * (128³ 1.9×, 96³ 1.9×, 8×512×512 1.3×, 256×256×16 2.2×, 128×784×10
 * 2.6×, the MLP and CNN shapes 1.1–2.5×), about as fast at N = 64
 * (64×64×784 0.98×, 64³ 0.95×) and slower when N is under 64 (NR = 32
 * lanes mostly padding: 256×48×256 0.93×, 256×16×256 0.56×, 512×8×512
 * 0.33×, 32×32×784 0.67×) or the product is tiny (16³ 0.70×, 32³ 0.90×:
 * the call's fixed cost). Those stay with OpenBLAS, as do GEMVs —
 * unless an operand is a pending reshape copy the generated GEMM reads
 * through (gemm_pack.c: a convolution's im2col columns): OpenBLAS would
 * need the copy written and read again, a pass over K × N that costs
 * more than the padded lanes (fashion_cnn's conv1 weight gradient,
 * 32×9×100352: the im2col and gradient copies cost 2× the product).
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "matmul_dims.h"
#include "rt_internal.h"

enum { MODE_AUTO = 0, MODE_JIT = 1, MODE_BLAS = 2 };

static int64_t read_mode(void) {
  const char *s = getenv("KILN_GEMM");
  if (!s || !*s || strcmp(s, "auto") == 0) return MODE_AUTO;
  if (strcmp(s, "jit") == 0) return MODE_JIT;
  if (strcmp(s, "blas") == 0) return MODE_BLAS;
  fprintf(stderr, "kiln: KILN_GEMM=%s is not jit, blas or auto; using auto\n", s);
  return MODE_AUTO;
}

static atomic_int_fast64_t env_mode = GRAPH_ENV_UNREAD;
static atomic_int forced_mode = -1; /* rt_gemm_set_mode; -1: the environment's */

void rt_gemm_set_mode(int mode) { atomic_store(&forced_mode, mode >= 0 && mode <= 2 ? mode : -1); }

static int mode(void) {
  int f = atomic_load(&forced_mode);
  return f >= 0 ? f : (int)graph_env_once(&env_mode, read_mode);
}

/* The auto rule (file comment): N ≥ 64, M ≥ 8, at least 2^19
 * multiply-adds per product. */
static bool jit_pays(const mm_dims *d) {
  return d->nn >= 64 && d->m >= 8 && (double)d->m * (double)d->nn * (double)d->k >= (double)(1 << 19);
}

bool rt_gemm_selected(const graph_node *n) {
  if (n->dtype != KILN_F32 && n->dtype != KILN_F64) return false;
  int m = mode();
  if (m != MODE_AUTO) return m == MODE_JIT;
  mm_dims d = mm_dims_of(n);
  return jit_pays(&d) || rt_gemm_pending_copy(n);
}

static _Thread_local bool last_jit;

/* An operand's host data is the input of the reshape copy it names:
 * rt_run_extern left that copy pending for the generated GEMM to read
 * through (gemm_pack.c); OpenBLAS cannot. */
static bool reads_through(const graph_node *n, const void *const *in) {
  for (int i = 0; i < n->n_inputs; i++)
    if (in[i] && in[i] == rt_gemm_copy_source(n, i, NULL)) return true;
  return false;
}

int rt_matmul_host(const graph_node *n, const void *const *in, graph_buffer *out, char *err, size_t errlen) {
  last_jit = reads_through(n, in) || rt_gemm_selected(n);
  return last_jit ? rt_gemm_matmul(n, in, out, err, errlen) : rt_blas_matmul(n, in, out, err, errlen);
}

int rt_matmul_host_last(bool *jit) {
  *jit = last_jit;
  return last_jit ? rt_gemm_last_threads() : rt_blas_last_threads();
}
