/*
 * cuda_gemm.c — a tiled GEMM kernel as CUDA C (cuda_backend.h,
 * "Tiled GEMM"): the product where cuBLAS is absent, printed for one
 * shape and layout, so that NVRTC and the cuda-emu host build compile
 * the same text as the kernels of cuda_print.c.
 *
 * Each block of CUDA_GEMM_THREADS threads computes one TILE × TILE tile of
 * C (BLOCK_PER_INDEX: the launch's indices are the tiles of every batch,
 * blocks step over them by gridDim.x). K is walked BK at a time: the
 * block stages A's TILE × BK and B's BK × TILE panels in shared memory
 * (zero past M, N and K, so edge tiles need no other test), each thread
 * then accumulates its 4 × 4 outputs (rows ty + 16 i, columns tx + 16 j:
 * neighbouring threads read neighbouring shared words) with fma in k
 * order. A staging loop walks the panel with consecutive threads along
 * whichever of the operand's two strides is 1, so global loads coalesce
 * for row- and column-major operands alike. Sizes, strides and offsets
 * are constants of the text: one kernel per shape, as for every kernel.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "cuda_backend.h"

#define TILE 64
#define BK 16

static bool spec_ok(const cuda_gemm_spec *s) {
  if (s->batch < 1 || s->m < 1 || s->n < 1 || s->k < 0) return false;
  const int64_t *v[] = {&s->a_off, &s->a_b, &s->a_m, &s->a_k, &s->b_off, &s->b_b,
                        &s->b_k,   &s->b_n, &s->c_off, &s->c_b, &s->c_m, &s->c_n};
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
    if (*v[i] < 0) return false;
  return true;
}

int64_t cuda_gemm_tiles(const cuda_gemm_spec *s) {
  return s->batch * ((s->m + TILE - 1) / TILE) * ((s->n + TILE - 1) / TILE);
}

void cuda_gemm_launch_rule(const cuda_gemm_spec *s, cuda_launch_rule *r) {
  r->kind = CUDA_LAUNCH_BLOCK_PER_INDEX;
  r->extent = cuda_gemm_tiles(s);
  r->block = CUDA_GEMM_THREADS;
}

/* The loop that stages one operand's panel: element (row r < TILE, k
 * kk < BK) of the tile at (r0, k0) into sh[kk][r], read at
 * g[(r0 + r)·rs + (k0 + kk)·ks] when inside rows × K. Consecutive
 * threads step along k when ks is 1 (and rs is not), else along r. */
static void stage(kir_strbuf *b, const char *sh, const char *g, int64_t rs, int64_t ks, const char *r0,
                  int64_t rows, int64_t k) {
  bool along_k = ks == 1 && rs != 1;
  kir_sb_printf(b,
                "      for (int i = threadIdx.x; i < %d; i += %d) {\n"
                "        const int kk = %s, r = %s;\n"
                "        const long long gr = %s + r, gk = k0 + kk;\n"
                "        %s[kk][r] = gr < %" PRId64 "LL && gk < %" PRId64 "LL ? %s[gr * %" PRId64 "LL + gk * %" PRId64
                "LL] : (T)0;\n"
                "      }\n",
                TILE * BK, CUDA_GEMM_THREADS, along_k ? "i % 16" : "i / 64", along_k ? "i / 16" : "i % 64", r0, sh,
                rows, k, g, rs, ks);
}

int cuda_gemm_print(const cuda_gemm_spec *s, const char *fname, char **out, char *err, size_t errlen) {
  *out = NULL;
  if (!spec_ok(s)) {
    snprintf(err, errlen, "cuda tiled GEMM: bad shape or strides (batch %" PRId64 ", %" PRId64 "x%" PRId64 "x%" PRId64
             ", negative strides not supported)", s->batch, s->m, s->n, s->k);
    return KILN_ERR_ARG;
  }
  int64_t tn = (s->n + TILE - 1) / TILE, per_batch = tn * ((s->m + TILE - 1) / TILE);
  kir_strbuf b = {0};
  kir_sb_printf(&b,
                "/* Kiln tiled GEMM: C[%" PRId64 "][%" PRId64 "x%" PRId64 "] = A·B, K %" PRId64 " */\n"
                "typedef %s T;\n"
                "extern \"C\" __global__ void __launch_bounds__(%d) %s(const T *__restrict__ A, "
                "const T *__restrict__ B, T *__restrict__ C, long long start, long long end) {\n"
                "  __shared__ T As[%d][%d];\n"
                "  __shared__ T Bs[%d][%d];\n"
                "  const int tx = threadIdx.x %% 16, ty = threadIdx.x / 16;\n"
                "  for (long long t = start + blockIdx.x; t < end; t += gridDim.x) {\n"
                "    const long long bt = t / %" PRId64 "LL, tile = t %% %" PRId64 "LL;\n"
                "    const long long m0 = tile / %" PRId64 "LL * %d, n0 = tile %% %" PRId64 "LL * %d;\n"
                "    const T *a = A + %" PRId64 "LL + bt * %" PRId64 "LL;\n"
                "    const T *b = B + %" PRId64 "LL + bt * %" PRId64 "LL;\n"
                "    T *c = C + %" PRId64 "LL + bt * %" PRId64 "LL;\n"
                "    T acc[4][4];\n"
                "    for (int i = 0; i < 4; i++)\n"
                "      for (int j = 0; j < 4; j++) acc[i][j] = (T)0;\n"
                "    for (long long k0 = 0; k0 < %" PRId64 "LL; k0 += %d) {\n",
                s->batch, s->m, s->n, s->k, s->f64 ? "double" : "float", CUDA_GEMM_THREADS, fname ? fname : "kiln_gemm",
                BK, TILE, BK, TILE, per_batch, per_batch, tn, TILE, tn, TILE, s->a_off, s->a_b, s->b_off, s->b_b,
                s->c_off, s->c_b, s->k, BK);
  stage(&b, "As", "a", s->a_m, s->a_k, "m0", s->m, s->k);
  stage(&b, "Bs", "b", s->b_n, s->b_k, "n0", s->n, s->k);
  kir_sb_printf(&b,
                "      __syncthreads();\n"
                "      for (int kk = 0; kk < %d; kk++) {\n"
                "        T av[4], bv[4];\n"
                "        for (int i = 0; i < 4; i++) av[i] = As[kk][ty + 16 * i], bv[i] = Bs[kk][tx + 16 * i];\n"
                "        for (int i = 0; i < 4; i++)\n"
                "          for (int j = 0; j < 4; j++) acc[i][j] = fma(av[i], bv[j], acc[i][j]);\n"
                "      }\n"
                "      __syncthreads();\n"
                "    }\n"
                "    for (int i = 0; i < 4; i++)\n"
                "      for (int j = 0; j < 4; j++) {\n"
                "        const long long gm = m0 + ty + 16 * i, gn = n0 + tx + 16 * j;\n"
                "        if (gm < %" PRId64 "LL && gn < %" PRId64 "LL) c[gm * %" PRId64 "LL + gn * %" PRId64
                "LL] = acc[i][j];\n"
                "      }\n"
                "  }\n"
                "}\n",
                BK, s->m, s->n, s->c_m, s->c_n);
  if (b.oom) {
    free(b.p);
    snprintf(err, errlen, "cuda tiled GEMM: out of memory printing the kernel");
    return KILN_ERR_OOM;
  }
  *out = b.p;
  return KILN_OK;
}
