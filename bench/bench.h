/*
 * bench.h — shared declarations of kiln_bench: sizes, the workload tables
 * (memory-bound rows, GEMM rows), the machine's limits (triad, read
 * roofline, compute roofline), OpenBLAS timed directly, and the error
 * check every Kiln call goes through.
 *
 * Units everywhere: times in ns (int64) or s (double), bandwidth in GB/s
 * (10^9 bytes per second), sizes in elements.
 */
#ifndef KILN_BENCH_H
#define KILN_BENCH_H

#include <kiln/kiln.h>
#include <stdbool.h>
#include <stdint.h>

/* Problem sizes, full or --quick. */
typedef struct bench_sizes {
  int64_t n;        /* W1, W2, W3a: elements of the 1-d inputs */
  int64_t sq;       /* W3b, W3c, W4, W7: sq × sq matrices */
  int64_t ln_rows;  /* W5: rows */
  int64_t ln_cols;  /* W5: normalised (last) dim */
  int64_t tiny;     /* W8: elements of each tiny tensor */
  int chain;        /* W8: ops in the chain */
  int64_t triad_n;  /* triad: elements of each of its three arrays */
  int64_t gemm;      /* G1, G4: gemm × gemm × gemm */
  int64_t conv_cols; /* G2: columns of the conv2 product (images × 14 × 14) */
  int64_t mlp_batch; /* G3: rows of the MLP's activations (its batch) */
} bench_sizes;

/* A GEMM row's product, M×N×K: C [m, n] = op(A) [m, k] · op(B) [k, n],
 * F32 row-major. ta: A is stored [k, m] and read transposed; tb: B is
 * stored [n, k]. epilogue: relu(C + bias[n]), gelu(C + bias[n]) with
 * gelu. */
typedef struct bench_gemm {
  int64_t m, n, k;
  bool ta, tb, epilogue, gelu;
} bench_gemm;

#define BENCH_MAX_INPUTS 4

/* One measured row. setup() creates and realizes the inputs (owned by the
 * caller's scope); build() records the computation and returns its output
 * (owned by the caller's scope), leaving it unforced. bytes() is the
 * traffic a perfect single pass needs, defined next to each workload. */
typedef struct bench_workload {
  const char *id;     /* row id, e.g. "W3a" */
  const char *group;  /* name --only selects, e.g. "W3" */
  const char *what;   /* one-line description */
  const char *target; /* printed target */
  int want_kernels;   /* target kernel count, 0 = none */
  double min_triad;   /* target fraction of triad GB/s, 0 = none */
  double min_numpy;   /* target speedup over NumPy, 0 = none */
  void (*setup)(const bench_sizes *s, kiln_tensor **in);
  kiln_tensor *(*build)(kiln_tensor **in);
  double (*bytes)(const bench_sizes *s);
  /* Compares sampled elements of a forced output y with a host reference
   * computed in double from the inputs; returns the worst error in units
   * of the tolerance (<= 1 is right). */
  double (*check)(const bench_sizes *s, kiln_tensor **in, kiln_tensor *y);
  double min_torch; /* target speedup over PyTorch, 0 = none */
  bool read_only;   /* only reads memory (a reduction): its limit is the read roofline, not the triad */
  /* GEMM rows (gemm.c; NULL for the others): the product, whose FLOP and
   * bytes kiln_bench computes (bytes() is unused). Their limit is the
   * compute roofline (min_triad: the fraction of it to reach). */
  bench_gemm (*gemm)(const bench_sizes *s);
  double min_blas;     /* target speedup over the best OpenBLAS kernel, 0 = none */
  double max_epilogue; /* target: epilogue time over G1's, in %, 0 = none */
} bench_workload;

/* The workloads W1..W7 and K1 in table order (workloads.c). */
extern const bench_workload bench_workloads[];
extern const int bench_n_workloads;
/* Looks a workload up by row id; NULL if absent. */
const bench_workload *bench_find(const char *id);
/* The GEMM rows G1..G4 in table order (gemm.c). */
extern const bench_workload bench_gemm_workloads[];
extern const int bench_n_gemm_workloads;
/* True when `only` (a --only list; NULL: everything) names `group` or the
 * row `id` (bench.c). */
bool bench_selected(const char *only, const char *group, const char *id);

/* W8 (workloads.c): records x -> op_0 -> ... -> op_{chain-1}, the ops
 * cycling through mul_scalar, add (with x), tanh, sub_scalar. Returns the
 * last tensor, owned by the caller's scope; intermediates are released. */
kiln_tensor *bench_w8_chain(kiln_tensor *x, int chain);
/* The check for W8's output y of bench_w8_chain(x, chain), as above. */
double bench_w8_check(kiln_tensor *x, kiln_tensor *y, int chain);

/* Best triad bandwidth in GB/s over `reps` runs with `threads` threads on
 * three F32 arrays of n elements each (triad.c). Returns < 0 on failure. */
double bench_triad(int64_t n, int threads, int reps);
/* Best read bandwidth in GB/s: a sum over the same three arrays (3 × n
 * F32 elements, read only), `threads` pthreads, best of `reps` runs
 * (triad.c; call after bench_triad, whose arrays it reads). Returns < 0
 * on failure. */
double bench_read(int64_t n, int threads, int reps);
/* Frees the arrays bench_triad keeps between calls. */
void bench_triad_free(void);

/* Hand-written AVX-512 reference of W7 (n % 16 == 0) and W7r (n % 16 ==
 * 15): out[i][j] = a[j][i] + b[j] on [n, n] F32, `threads` pthreads,
 * `reps` timed runs (w7_hand.c; each thread first-touches its part of the
 * output before them). Fills the median and
 * best time in ns and the check's worst error (0: exact, > 1: wrong).
 * Returns 0, -1 where unsupported (no AVX-512F, not x86-64, another n),
 * -2 out of memory. */
int bench_w7_hand(int64_t n, int threads, int reps, int64_t *med_ns, int64_t *min_ns, double *err);

/* The F32 multiply-add peak in GFLOP/s of `threads` pthreads, each
 * running a vector loop (`iters` iterations of 12 independent chains),
 * best of `reps` runs, with the variant for a target of `vector_bits`-bit
 * vectors (the JIT's: kiln_cpu_target) that this CPU runs (peak.c); its
 * name in *variant. Returns < 0 where there is none (not x86-64). */
double bench_fma_peak(int threads, int vector_bits, int reps, int64_t iters, const char **variant);

/* Median seconds of cblas_sgemm on g (no epilogue) with OpenBLAS on
 * `threads` threads, after a warm-up, over at least 3 runs and up to
 * max_runs (≤ 4096) filling budget_ns; *runs gets the count (gemm.c).
 * OpenBLAS's thread count is restored afterwards. < 0: out of memory. */
double bench_blas_gemm(const bench_gemm *g, int threads, int64_t budget_ns, int max_runs, int *runs);
/* The name of the kernel OpenBLAS chose at load time (openblas_get_corename). */
const char *bench_blas_core(void);
/* The child side of the OpenBLAS comparison (kiln_bench --blas-child,
 * started without OPENBLAS_CORETYPE): one line per selected GEMM row,
 * "blas ID SECONDS RUNS CORE" (gemm.c). */
void bench_blas_child(const bench_sizes *s, const char *only, int threads, int64_t budget_ns, int max_runs);

/* Monotonic clock in ns. */
int64_t bench_now_ns(void);

/* Exits with the Kiln error message when the thread has an error or `ok`
 * is false. `what` names the call (the BK macros pass its source text). */
void bench_check(bool ok, const char *what, int line);
#define BK(expr) bench_ck_t((expr), #expr, __LINE__)
#define BKS(expr) bench_ck_s((expr), #expr, __LINE__)
static inline kiln_tensor *bench_ck_t(kiln_tensor *t, const char *what, int line) {
  bench_check(t != NULL, what, line);
  return t;
}
static inline int bench_ck_s(int rc, const char *what, int line) {
  bench_check(rc >= 0, what, line);
  return rc;
}

#endif /* KILN_BENCH_H */
