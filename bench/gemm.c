/*
 * gemm.c — the GEMM rows G1–G5 of kiln_bench: what each computes (the
 * shapes Kiln's own programs multiply), Kiln's version through the public
 * API, and the same products through OpenBLAS's cblas_sgemm called
 * directly: in this process (OpenBLAS as configured here: this machine
 * sets OPENBLAS_CORETYPE=Haswell, its AVX2 kernels) and in a child
 * process of this program started without OPENBLAS_CORETYPE (OpenBLAS's
 * own choice of kernel for the CPU: AVX-512 where the CPU has it; OpenBLAS
 * reads the variable once, when it is loaded, so only a fresh process can
 * change it). The better of the two is "the best OpenBLAS kernel".
 *
 * Shapes, M×N×K, C [M, N] = op(A) [M, K] · op(B) [K, N], F32 row-major:
 *   G1   2048×2048×2048, A and B contiguous (sgemm's usual figure);
 *   G2   the CNN's conv2 product (examples/fashion_cnn.c, nn/conv.c): the
 *        weight [64, 32·3·3] times the im2col columns [288, N·14·14] of a
 *        batch of N = 128 images, 64×25088×288, both contiguous;
 *   G3a  the MLP's forward x·W1 (examples/fashion_mnist.c), x [128, 784],
 *        W1 [784, 256]: 128×256×784;
 *   G3b  its weight gradient x^T·dy: 784×256×128, x read transposed;
 *   G3c  its input gradient dy·W1^T: 128×784×256, W1 read transposed;
 *   G4   relu(a@b + bias) at G1's shape, bias [N] a broadcast row;
 *   G5   gelu(a@b + bias) (erf form) at G1's shape: a general epilogue,
 *        the fuser's kernel run per tile (runtime/gemm_group.c).
 * OpenBLAS has no epilogue: its G4 and G5 figures are the bare product, so G4's
 * "x best OpenBLAS" prices Kiln's product and epilogue against the
 * product alone (kiln_bench prints the epilogue's share separately).
 *
 * FLOP = 2·M·N·K (the epilogue's 2·M·N not counted). Inputs are uniform
 * [0, 1) (kiln_rand; the OpenBLAS buffers a fixed pattern of the same
 * range); the check compares sampled outputs with a double dot product.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "bench.h"

#define SAMPLES 7

/* ------------------------------------------------------------ shapes */

static bench_gemm g1(const bench_sizes *s) { return (bench_gemm){.m = s->gemm, .n = s->gemm, .k = s->gemm}; }
static bench_gemm g2(const bench_sizes *s) { return (bench_gemm){.m = 64, .n = s->conv_cols, .k = 32 * 3 * 3}; }
static bench_gemm g3a(const bench_sizes *s) { return (bench_gemm){.m = s->mlp_batch, .n = 256, .k = 784}; }
static bench_gemm g3b(const bench_sizes *s) {
  return (bench_gemm){.m = 784, .n = 256, .k = s->mlp_batch, .ta = true};
}
static bench_gemm g3c(const bench_sizes *s) {
  return (bench_gemm){.m = s->mlp_batch, .n = 784, .k = 256, .tb = true};
}
static bench_gemm g4(const bench_sizes *s) {
  bench_gemm g = g1(s);
  g.epilogue = true;
  return g;
}
static bench_gemm g5(const bench_sizes *s) {
  bench_gemm g = g4(s);
  g.gelu = true;
  return g;
}

/* --------------------------------------------------------------- Kiln */

/* A realized uniform F32 [r, c]. */
static kiln_tensor *input(int64_t r, int64_t c) {
  kiln_tensor *t = BK(kiln_rand(KILN_F32, 2, (int64_t[]){r, c}));
  BKS(kiln_realize(t));
  return t;
}

/* in[0] = op(A) [m, k], in[1] = op(B) [k, n] (a transposed view of the
 * stored matrix where g says), in[2] = bias [n] or NULL. */
static void setup(bench_gemm g, kiln_tensor **in) {
  in[0] = g.ta ? BK(kiln_t(input(g.k, g.m))) : input(g.m, g.k);
  in[1] = g.tb ? BK(kiln_t(input(g.n, g.k))) : input(g.k, g.n);
  if (g.epilogue) {
    in[2] = BK(kiln_sub_scalar(BK(kiln_rand(KILN_F32, 1, (int64_t[]){g.n})), 0.5));
    BKS(kiln_realize(in[2]));
  }
}
static void setup_g1(const bench_sizes *s, kiln_tensor **in) { setup(g1(s), in); }
static void setup_g2(const bench_sizes *s, kiln_tensor **in) { setup(g2(s), in); }
static void setup_g3a(const bench_sizes *s, kiln_tensor **in) { setup(g3a(s), in); }
static void setup_g3b(const bench_sizes *s, kiln_tensor **in) { setup(g3b(s), in); }
static void setup_g3c(const bench_sizes *s, kiln_tensor **in) { setup(g3c(s), in); }
static void setup_g4(const bench_sizes *s, kiln_tensor **in) { setup(g4(s), in); }
static void setup_g5(const bench_sizes *s, kiln_tensor **in) { setup(g5(s), in); }

/* in[0] @ in[1], then relu(. + in[2]) (gelu with `gelu`) when there is
 * a bias. */
static kiln_tensor *build_with(kiln_tensor **in, bool gelu) {
  kiln_scope_begin();
  kiln_tensor *y = BK(kiln_matmul(in[0], in[1]));
  if (in[2]) y = gelu ? BK(kiln_gelu(BK(kiln_add(y, in[2])))) : BK(kiln_relu(BK(kiln_add(y, in[2]))));
  kiln_keep(y);
  kiln_scope_end();
  return y;
}
static kiln_tensor *build(kiln_tensor **in) { return build_with(in, false); }
static kiln_tensor *build_gelu(kiln_tensor **in) { return build_with(in, true); }

static double get2(kiln_tensor *t, int64_t i, int64_t j) {
  double v = kiln_get(t, (int64_t[]){i, j});
  bench_check(true, "kiln_get", __LINE__);
  return v;
}

/* Sampled outputs against a double dot product, in units of a tolerance
 * of 1e-4 relative (K up to 2048 products of [0, 1) values). */
static double check_with(kiln_tensor **in, kiln_tensor *y, bool gelu) {
  int64_t m = kiln_size(y, 0), n = kiln_size(y, 1), k = kiln_size(in[0], 1);
  double worst = 0;
  for (int t = 0; t < SAMPLES; t++) {
    int64_t i = (int64_t)t * (m - 1) / (SAMPLES - 1), j = (int64_t)(SAMPLES - 1 - t) * (n - 1) / (SAMPLES - 1);
    double want = 0;
    for (int64_t p = 0; p < k; p++) want += get2(in[0], i, p) * get2(in[1], p, j);
    if (in[2]) {
      want += kiln_get(in[2], (int64_t[]){j});
      want = gelu ? 0.5 * want * (1 + erf(want / sqrt(2.0))) : want > 0 ? want : 0;
    }
    double e = fabs(get2(y, i, j) - want) / (1e-4 + 1e-4 * fabs(want));
    if (!(e <= worst)) worst = e; /* NaN counts as wrong */
  }
  return worst;
}
static double check(const bench_sizes *s, kiln_tensor **in, kiln_tensor *y) {
  (void)s;
  return check_with(in, y, false);
}
static double check_gelu(const bench_sizes *s, kiln_tensor **in, kiln_tensor *y) {
  (void)s;
  return check_with(in, y, true);
}

/* Unused: kiln_bench takes a GEMM row's bytes and FLOP from its shape. */
static double no_bytes(const bench_sizes *s) {
  (void)s;
  return 0;
}

#define G_TARGET ">=1.0x best OpenBLAS"
const bench_workload bench_gemm_workloads[] = {
    {"G1", "G1", "sgemm N x N x N, N = 2048 (--quick: 256), row-major, contiguous", ">=0.85x roofline, " G_TARGET, 0, 0.85, 0, setup_g1,
     build, no_bytes, check, 0, false, g1, 1.0, 0},
    {"G2", "G2", "CNN conv2 product: weight [64, 288] x im2col columns [288, B*14*14], B = 128 images (--quick: 4)", G_TARGET, 0, 0, 0,
     setup_g2, build, no_bytes, check, 0, false, g2, 1.0, 0},
    {"G3a", "G3", "MLP forward x W1: [128, 784] x [784, 256]", G_TARGET, 0, 0, 0, setup_g3a, build, no_bytes, check,
     0, false, g3a, 1.0, 0},
    {"G3b", "G3", "MLP dW1 = x^T dy: [784, 128] (x read transposed) x [128, 256]", G_TARGET, 0, 0, 0, setup_g3b,
     build, no_bytes, check, 0, false, g3b, 1.0, 0},
    {"G3c", "G3", "MLP dx = dy W1^T: [128, 256] x [256, 784] (W1 read transposed)", G_TARGET, 0, 0, 0, setup_g3c,
     build, no_bytes, check, 0, false, g3c, 1.0, 0},
    {"G4", "G4", "relu(a@b + bias[None, :]) at G1's N x N x N", "epilogue <=3% over G1", 0, 0, 0, setup_g4, build, no_bytes,
     check, 0, false, g4, 0, 3.0},
    {"G5", "G5", "gelu(a@b + bias[None, :]) (erf) at G1's N x N x N: a general epilogue", "epilogue reported (no target)", 0,
     0, 0, setup_g5, build_gelu, no_bytes, check_gelu, 0, false, g5, 0, 0},
};
const int bench_n_gemm_workloads = (int)(sizeof bench_gemm_workloads / sizeof bench_gemm_workloads[0]);

/* ----------------------------------------------------- OpenBLAS direct */

/* Stored A, B and C of one shape, filled with a fixed pattern in [0, 1). */
typedef struct blas_bufs {
  float *a, *b, *c;
} blas_bufs;

static bool blas_alloc(const bench_gemm *g, blas_bufs *m) {
  size_t na = (size_t)(g->m * g->k), nb = (size_t)(g->k * g->n), nc = (size_t)(g->m * g->n);
  m->a = aligned_alloc(64, (na * 4 + 63) / 64 * 64);
  m->b = aligned_alloc(64, (nb * 4 + 63) / 64 * 64);
  m->c = aligned_alloc(64, (nc * 4 + 63) / 64 * 64);
  if (!m->a || !m->b || !m->c) return false;
  for (size_t i = 0; i < na; i++) m->a[i] = (float)(i % 1009) / 1009.0f;
  for (size_t i = 0; i < nb; i++) m->b[i] = (float)(i % 997) / 997.0f;
  memset(m->c, 0, nc * 4);
  return true;
}

static void blas_free(blas_bufs *m) {
  free(m->a), free(m->b), free(m->c);
  m->a = m->b = m->c = NULL;
}

/* C = op(A)·op(B) as Kiln hands it to OpenBLAS (runtime/blas.c): a
 * transposed operand is its stored matrix with a transpose flag. */
static void sgemm(const bench_gemm *g, const blas_bufs *m) {
  cblas_sgemm(CblasRowMajor, g->ta ? CblasTrans : CblasNoTrans, g->tb ? CblasTrans : CblasNoTrans, (blasint)g->m,
              (blasint)g->n, (blasint)g->k, 1.0f, m->a, (blasint)(g->ta ? g->m : g->k), m->b,
              (blasint)(g->tb ? g->k : g->n), 0.0f, m->c, (blasint)g->n);
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

double bench_blas_gemm(const bench_gemm *g, int threads, int64_t budget_ns, int max_runs, int *runs) {
  blas_bufs m;
  if (max_runs < 3 || max_runs > 4096 || !blas_alloc(g, &m)) {
    blas_free(&m);
    return -1;
  }
  int saved = openblas_get_num_threads();
  openblas_set_num_threads(threads);
  sgemm(g, &m); /* warm-up: OpenBLAS's threads start, buffers are touched */
  int64_t t[4096], spent = 0;
  int n = 0;
  while (n < max_runs && (n < 3 || spent < budget_ns)) {
    int64_t t0 = bench_now_ns();
    sgemm(g, &m);
    t[n] = bench_now_ns() - t0;
    spent += t[n++];
  }
  openblas_set_num_threads(saved); /* Kiln's own calls run single-threaded on its pool */
  blas_free(&m);
  qsort(t, (size_t)n, sizeof t[0], cmp_i64);
  *runs = n;
  return (double)(n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2) / 1e9;
}

const char *bench_blas_core(void) { return openblas_get_corename(); }

/* ------------------------------------------------------- the child */

void bench_blas_child(const bench_sizes *s, const char *only, int threads, int64_t budget_ns, int max_runs) {
  for (int i = 0; i < bench_n_gemm_workloads; i++) {
    const bench_workload *w = &bench_gemm_workloads[i];
    if (!bench_selected(only, w->group, w->id)) continue;
    bench_gemm g = w->gemm(s);
    int runs = 0;
    double sec = bench_blas_gemm(&g, threads, budget_ns, max_runs, &runs);
    printf("blas %s %.9g %d %s\n", w->id, sec, runs, bench_blas_core());
  }
  fflush(stdout);
}
