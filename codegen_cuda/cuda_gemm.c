/*
 * cuda_gemm.c — a tiled GEMM kernel as CUDA C (cuda_backend.h,
 * "Tiled GEMM"): the product where cuBLAS is absent, printed so that
 * NVRTC and the cuda-emu host build compile the same text as the kernels
 * of cuda_print.c.
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
 * for row- and column-major operands alike (a panel row holds TILE + 1
 * words, so threads storing down a column of it hit different banks):
 * that choice and the element type make the kernel's variant; sizes,
 * strides and offsets are read from a parameter array
 * (cuda_gemm_params), so one kernel per variant serves every shape.
 *
 * A fused epilogue (up to CUDA_GEMM_EPI_MAX steps: bias, relu, scale,
 * residual, clamp) is applied by each thread to each of its outputs in
 * registers before the store; the steps' operations and operand kinds
 * are part of the variant, their operands' places and fill values are
 * entries of the parameter array (epi_params), the operand buffers
 * parameters E0... after P.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_backend.h"

#define TILE 64
#define BK 16

/* The parameter array's entries (P[...] in the kernel). */
enum { P_M, P_N, P_K, P_TN, P_PER_BATCH, P_A, P_B = P_A + 4, P_C = P_B + 4, P_E = P_C + 4 };
_Static_assert(P_E + 4 * CUDA_GEMM_EPI_MAX == CUDA_GEMM_NPARAMS, "parameter count");

/* The operand kind step op takes. */
static int operand_of(int op) {
  return op == CUDA_GEMM_EPI_RELU ? CUDA_GEMM_OPND_NONE : CUDA_GEMM_OPND_BUFFER; /* or VALUE */
}

/* kind when op takes it, else -1. */
static int operand_of_variant(int op, int kind) {
  bool none = operand_of(op) == CUDA_GEMM_OPND_NONE;
  return none == (kind == CUDA_GEMM_OPND_NONE) && kind <= CUDA_GEMM_OPND_BUFFER ? kind : -1;
}

static bool epi_ok(const cuda_gemm_spec *s) {
  if (s->n_epi < 0 || s->n_epi > CUDA_GEMM_EPI_MAX) return false;
  for (int i = 0; i < s->n_epi; i++) {
    const cuda_gemm_epi_step *e = &s->epi[i];
    if (e->op < CUDA_GEMM_EPI_ADD || e->op > CUDA_GEMM_EPI_MINIMUM) return false;
    if (operand_of_variant(e->op, e->operand) < 0) return false;
    if (e->operand == CUDA_GEMM_OPND_BUFFER && (e->off < 0 || e->sb < 0 || e->sm < 0 || e->sn < 0)) return false;
  }
  return true;
}

bool cuda_gemm_spec_ok(const cuda_gemm_spec *s) {
  if (s->batch < 1 || s->m < 1 || s->n < 1 || s->k < 0) return false;
  const int64_t *v[] = {&s->a_off, &s->a_b, &s->a_m, &s->a_k, &s->b_off, &s->b_b,
                        &s->b_k,   &s->b_n, &s->c_off, &s->c_b, &s->c_m, &s->c_n};
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
    if (*v[i] < 0) return false;
  return epi_ok(s);
}

int64_t cuda_gemm_tiles(const cuda_gemm_spec *s) {
  return s->batch * ((s->m + TILE - 1) / TILE) * ((s->n + TILE - 1) / TILE);
}

void cuda_gemm_launch_rule(cuda_launch_rule *r) {
  r->kind = CUDA_LAUNCH_BLOCK_PER_INDEX;
  r->extent = INT64_MAX; /* the launch's [start, end) is each product's tiles */
  r->block = CUDA_GEMM_THREADS;
}

cuda_gemm_variant cuda_gemm_variant_of(const cuda_gemm_spec *s) {
  cuda_gemm_variant v = {.f64 = s->f64, .a_along_k = s->a_k == 1 && s->a_m != 1,
                         .b_along_k = s->b_k == 1 && s->b_n != 1, .n_epi = s->n_epi};
  for (int i = 0; i < s->n_epi; i++) v.epi_op[i] = s->epi[i].op, v.epi_operand[i] = s->epi[i].operand;
  return v;
}

int cuda_gemm_n_buffers(cuda_gemm_variant v) { return 4 + v.n_epi; }

/* Step e's entries of the parameter array: a buffer operand's place, or
 * a fill value's bits as a double. */
static void epi_params(const cuda_gemm_epi_step *e, int64_t *q) {
  q[0] = q[1] = q[2] = q[3] = 0;
  if (e->operand == CUDA_GEMM_OPND_VALUE) memcpy(&q[0], &e->value, sizeof e->value);
  if (e->operand != CUDA_GEMM_OPND_BUFFER) return;
  q[0] = e->off, q[1] = e->sb, q[2] = e->sm, q[3] = e->sn;
}

int cuda_gemm_params(const cuda_gemm_spec *s, int64_t p[CUDA_GEMM_NPARAMS], char *err, size_t errlen) {
  if (!cuda_gemm_spec_ok(s)) {
    snprintf(err, errlen,
             "cuda tiled GEMM: bad shape or strides (batch %" PRId64 ", %" PRId64 "x%" PRId64 "x%" PRId64
             ", negative strides not supported)",
             s->batch, s->m, s->n, s->k);
    return KILN_ERR_ARG;
  }
  int64_t tn = (s->n + TILE - 1) / TILE;
  const int64_t v[P_E] = {s->m,     s->n,   s->k,   tn,       tn * ((s->m + TILE - 1) / TILE),
                          s->a_off, s->a_b, s->a_m, s->a_k,   s->b_off,
                          s->b_b,   s->b_n, s->b_k, s->c_off, s->c_b,
                          s->c_m,   s->c_n};
  for (int i = 0; i < P_E; i++) p[i] = v[i];
  for (int i = 0; i < CUDA_GEMM_EPI_MAX; i++) {
    static const cuda_gemm_epi_step none = {0};
    epi_params(i < s->n_epi ? &s->epi[i] : &none, &p[P_E + 4 * i]);
  }
  return KILN_OK;
}

/* The loop that stages one operand's panel: element (row r < TILE, k
 * kk < BK) of the tile at (r0, k0) into sh[kk][r], read at
 * g[(r0 + r)·rs + (k0 + kk)·ks] when inside rows × K (P[...] the
 * operand's entries: rs at P[at + 2], ks at P[at + 3]). Consecutive
 * threads step along k when along_k, else along r. */
static void stage(kir_strbuf *b, const char *sh, const char *g, int at, bool along_k, const char *r0,
                  const char *rows) {
  kir_sb_printf(b,
                "      for (int i = threadIdx.x; i < %d; i += %d) {\n"
                "        const int kk = %s, r = %s;\n"
                "        const long long gr = %s + r, gk = k0 + kk;\n"
                "        %s[kk][r] = gr < %s && gk < K ? %s[gr * P[%d] + gk * P[%d]] : (T)0;\n"
                "      }\n",
                TILE * BK, CUDA_GEMM_THREADS, along_k ? "i % 16" : "i / 64", along_k ? "i / 16" : "i % 64", r0, sh,
                rows, g, at + 2, at + 3);
}

/* The statement that applies step s (operation op, operand kind kind)
 * to v, the element (gm, gn) of batch bt (its entries at P[P_E + 4s]). */
static void epi_step(kir_strbuf *b, int s, int op, int kind) {
  int q = P_E + 4 * s;
  if (kind == CUDA_GEMM_OPND_BUFFER)
    kir_sb_printf(b, "          const T x%d = E%d[P[%d] + bt * P[%d] + gm * P[%d] + gn * P[%d]];\n", s, s, q, q + 1,
                  q + 2, q + 3);
  else if (kind == CUDA_GEMM_OPND_VALUE)
    kir_sb_printf(b, "          const T x%d = (T)__longlong_as_double(P[%d]);\n", s, q);
  static const char *const form[] = {
      [CUDA_GEMM_EPI_ADD] = "v + x%d",        [CUDA_GEMM_EPI_SUB] = "v - x%d",
      [CUDA_GEMM_EPI_RSUB] = "x%d - v",       [CUDA_GEMM_EPI_MUL] = "v * x%d",
      [CUDA_GEMM_EPI_DIV] = "v / x%d",        [CUDA_GEMM_EPI_RDIV] = "x%d / v",
      [CUDA_GEMM_EPI_RELU] = "kiln_fmax(v, (T)0)", [CUDA_GEMM_EPI_MAXIMUM] = "kiln_fmax(v, x%d)",
      [CUDA_GEMM_EPI_MINIMUM] = "kiln_fmin(v, x%d)",
  };
  kir_sb_printf(b, "          v = ");
  kir_sb_printf(b, form[op], s);
  kir_sb_printf(b, ";\n");
}

int cuda_gemm_print(cuda_gemm_variant v, const char *fname, char **out, char *err, size_t errlen) {
  *out = NULL;
  bool ok = v.n_epi >= 0 && v.n_epi <= CUDA_GEMM_EPI_MAX;
  for (int i = 0; ok && i < v.n_epi; i++)
    ok = v.epi_op[i] >= CUDA_GEMM_EPI_ADD && v.epi_op[i] <= CUDA_GEMM_EPI_MINIMUM &&
         v.epi_operand[i] == operand_of_variant(v.epi_op[i], v.epi_operand[i]);
  if (!ok) {
    snprintf(err, errlen, "cuda tiled GEMM: bad epilogue steps in the variant");
    return KILN_ERR_ARG;
  }
  kir_strbuf b = {0};
  kir_sb_printf(&b, "/* Kiln tiled GEMM (%s, A staged along %s, B along %s, %d epilogue steps) */\n%s",
                v.f64 ? "f64" : "f32", v.a_along_k ? "k" : "m", v.b_along_k ? "k" : "n", v.n_epi,
                v.n_epi ? cuda_float_minmax() : "");
  kir_sb_printf(&b,
                "typedef %s T;\n"
                "extern \"C\" __global__ void __launch_bounds__(%d) %s(const T *__restrict__ A, "
                "const T *__restrict__ B, T *__restrict__ C, const long long *__restrict__ P, ",
                v.f64 ? "double" : "float", CUDA_GEMM_THREADS, fname ? fname : "kiln_gemm");
  for (int i = 0; i < v.n_epi; i++) kir_sb_printf(&b, "const T *__restrict__ E%d, ", i);
  kir_sb_printf(&b,
                "long long start, long long end) {\n"
                "  __shared__ T As[%d][%d];\n"
                "  __shared__ T Bs[%d][%d];\n"
                "  const int tx = threadIdx.x %% 16, ty = threadIdx.x / 16;\n"
                "  const long long M = P[%d], N = P[%d], K = P[%d];\n"
                "  for (long long t = start + blockIdx.x; t < end; t += gridDim.x) {\n"
                "    const long long bt = t / P[%d], tile = t %% P[%d];\n"
                "    const long long m0 = tile / P[%d] * %d, n0 = tile %% P[%d] * %d;\n"
                "    const T *a = A + P[%d] + bt * P[%d];\n"
                "    const T *b = B + P[%d] + bt * P[%d];\n"
                "    T *c = C + P[%d] + bt * P[%d];\n"
                "    T acc[4][4];\n"
                "    for (int i = 0; i < 4; i++)\n"
                "      for (int j = 0; j < 4; j++) acc[i][j] = (T)0;\n"
                "    for (long long k0 = 0; k0 < K; k0 += %d) {\n",
                BK, TILE + 1, BK, TILE + 1, P_M, P_N, P_K, P_PER_BATCH,
                P_PER_BATCH, P_TN, TILE, P_TN, TILE, P_A, P_A + 1, P_B, P_B + 1, P_C, P_C + 1, BK);
  stage(&b, "As", "a", P_A, v.a_along_k, "m0", "M");
  stage(&b, "Bs", "b", P_B, v.b_along_k, "n0", "N");
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
                "        if (gm < M && gn < N) {\n"
                "          T v = acc[i][j];\n",
                BK);
  for (int i = 0; i < v.n_epi; i++) epi_step(&b, i, v.epi_op[i], v.epi_operand[i]);
  kir_sb_printf(&b,
                "          c[gm * P[%d] + gn * P[%d]] = v;\n"
                "        }\n"
                "      }\n"
                "  }\n"
                "}\n",
                P_C + 2, P_C + 3);
  if (b.oom) {
    free(b.p);
    snprintf(err, errlen, "cuda tiled GEMM: out of memory printing the kernel");
    return KILN_ERR_OOM;
  }
  *out = b.p;
  return KILN_OK;
}
