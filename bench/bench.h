/*
 * bench.h — shared declarations of kiln_bench: sizes, the workload table,
 * the machine-limit triad, and the error check every Kiln call goes through.
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
} bench_sizes;

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
} bench_workload;

/* The workloads W1..W7 and K1 in table order (workloads.c). */
extern const bench_workload bench_workloads[];
extern const int bench_n_workloads;
/* Looks a workload up by row id; NULL if absent. */
const bench_workload *bench_find(const char *id);

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
