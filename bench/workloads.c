/*
 * workloads.c — the computations kiln_bench times, written as a user would
 * write them with the public API, and the bytes a perfect single pass over
 * each needs (the figure GB/s is computed from).
 *
 * Every build() records its graph inside its own scope and keeps only the
 * result, so intermediates are released before the force: the engine is free
 * to fuse them away, as it would be in a user's scoped code. Inputs come
 * from kiln_rand (uniform [0, 1), F32) and are realized by setup().
 * bench/peers.py times the same computations in NumPy and PyTorch; keep the
 * two files in step.
 */
#include <math.h>
#include <string.h>

#include "bench.h"

#define F4 4.0 /* bytes per F32 element */
#define SAMPLES 7 /* output elements each check compares */

/* ------------------------------------------------- checking helpers */

/* Host pointer to a realized contiguous F32 input. */
static const float *host(kiln_tensor *t) {
  const float *p = kiln_data(t);
  bench_check(p != NULL && kiln_is_contiguous(t) && kiln_dtype_of(t) == KILN_F32, "kiln_data(input)", __LINE__);
  return p;
}

/* Element [i] or [i, j] of a forced output (any layout). */
static double at1(kiln_tensor *y, int64_t i) {
  double v = kiln_get(y, (int64_t[]){i});
  bench_check(true, "kiln_get(output)", __LINE__);
  return v;
}
static double at2(kiln_tensor *y, int64_t i, int64_t j) {
  double v = kiln_get(y, (int64_t[]){i, j});
  bench_check(true, "kiln_get(output)", __LINE__);
  return v;
}

/* Error of `got` in units of the tolerance atol + rtol·|want|; NaN counts
 * as infinitely wrong. */
static double err(double got, double want, double atol, double rtol) {
  double e = fabs(got - want) / (atol + rtol * fabs(want));
  return isnan(e) ? INFINITY : e;
}

/* Sample k of SAMPLES, spread over [0, n). */
static int64_t spread(int k, int64_t n) { return (int64_t)k * (n - 1) / (SAMPLES - 1); }

/* A realized uniform F32 input of sizes [ndim]. */
static kiln_tensor *input(int ndim, const int64_t *sizes) {
  kiln_tensor *t = BK(kiln_rand(KILN_F32, ndim, sizes));
  BKS(kiln_realize(t));
  return t;
}

static void setup_vec4(const bench_sizes *s, kiln_tensor **in) {
  for (int i = 0; i < 4; i++) in[i] = input(1, (int64_t[]){s->n});
}
static void setup_vec1(const bench_sizes *s, kiln_tensor **in) { in[0] = input(1, (int64_t[]){s->n}); }
static void setup_sq(const bench_sizes *s, kiln_tensor **in) { in[0] = input(2, (int64_t[]){s->sq, s->sq}); }
static void setup_ln(const bench_sizes *s, kiln_tensor **in) {
  in[0] = input(2, (int64_t[]){s->ln_rows, s->ln_cols});
}
static void setup_w7(const bench_sizes *s, kiln_tensor **in) {
  in[0] = input(2, (int64_t[]){s->sq, s->sq});
  in[1] = input(1, (int64_t[]){s->sq});
}
static void setup_w7r(const bench_sizes *s, kiln_tensor **in) {
  in[0] = input(2, (int64_t[]){s->sq - 1, s->sq - 1});
  in[1] = input(1, (int64_t[]){s->sq - 1});
}
static void setup_w7b(const bench_sizes *s, kiln_tensor **in) {
  in[0] = input(3, (int64_t[]){4, s->sq / 2, s->sq / 2});
  in[1] = input(1, (int64_t[]){s->sq / 2});
}

/* ---- W1: relu(a*b + c) * sigmoid(d), inputs [n].
 * bytes = 4 inputs read + 1 output written = 5 × 4n. */
static kiln_tensor *build_w1(kiln_tensor **in) {
  kiln_scope_begin();
  kiln_tensor *ab = BK(kiln_mul(in[0], in[1]));
  kiln_tensor *r = BK(kiln_relu(BK(kiln_add(ab, in[2]))));
  kiln_tensor *y = BK(kiln_mul(r, BK(kiln_sigmoid(in[3]))));
  kiln_keep(y);
  kiln_scope_end();
  return y;
}
static double bytes_w1(const bench_sizes *s) { return 5 * F4 * (double)s->n; }

/* ---- W2: 10 × (y = tanh(y*1.0001 + 0.5)), y [n].
 * bytes = y read once + written once = 2 × 4n (30 ops per element:
 * 10 × mul, add, tanh). */
static kiln_tensor *build_w2(kiln_tensor **in) {
  kiln_scope_begin();
  kiln_tensor *y = in[0];
  for (int i = 0; i < 10; i++) y = BK(kiln_tanh(BK(kiln_add_scalar(BK(kiln_mul_scalar(y, 1.0001)), 0.5))));
  kiln_keep(y);
  kiln_scope_end();
  return y;
}
static double bytes_w2(const bench_sizes *s) { return 2 * F4 * (double)s->n; }

/* ---- W3a: sum of all n elements. bytes = 4n read (+4 written). */
static kiln_tensor *build_w3a(kiln_tensor **in) { return BK(kiln_sum(in[0], 0, NULL, false)); }
static double bytes_w3a(const bench_sizes *s) { return F4 * (double)s->n + F4; }

/* ---- W3b: x [sq, sq] summed over dim 0 -> [sq]. bytes = 4·sq² + 4·sq. */
static kiln_tensor *build_w3b(kiln_tensor **in) { return BK(kiln_sum(in[0], 1, (int[]){0}, false)); }
/* ---- W3c: x [sq, sq] summed over dim 1 -> [sq]. bytes as W3b. */
static kiln_tensor *build_w3c(kiln_tensor **in) { return BK(kiln_sum(in[0], 1, (int[]){1}, false)); }
static double bytes_w3bc(const bench_sizes *s) { return F4 * ((double)s->sq * (double)s->sq + (double)s->sq); }

/* ---- W4: softmax over rows of x [sq, sq] (kiln_softmax: max-subtracted,
 *   m = amax(x, -1); e = exp(x - m); y = e / sum(e, -1), fused into one kernel).
 * bytes = x read once + y written once = 2 × 4·sq². */
static kiln_tensor *build_w4(kiln_tensor **in) { return BK(kiln_softmax(in[0], -1)); }
static double bytes_sq2(const bench_sizes *s) { return 2 * F4 * (double)s->sq * (double)s->sq; }

/* ---- W5: layer norm over the last dim of x [R, C], eps 1e-5, no affine
 * (kiln_layer_norm: mu = mean(x); xc = x - mu; var = mean(xc*xc);
 * y = xc * rsqrt(var + eps), fused into one kernel).
 * bytes = x read once + y written once = 2 × 4·R·C. */
static kiln_tensor *build_w5(kiln_tensor **in) { return BK(kiln_layer_norm(in[0], 1, NULL, NULL, 1e-5)); }
static double bytes_w5(const bench_sizes *s) { return 2 * F4 * (double)s->ln_rows * (double)s->ln_cols; }

/* ---- W7: a.T + b[None, :], a [sq, sq], b [sq] -> row-major [sq, sq].
 * bytes = a read + b read + result written = 4·(2·sq² + sq). */
static kiln_tensor *build_w7(kiln_tensor **in) {
  kiln_scope_begin();
  kiln_tensor *y = BK(kiln_add(BK(kiln_t(in[0])), BK(kiln_unsqueeze(in[1], 0))));
  kiln_keep(y);
  kiln_scope_end();
  return y;
}
static double bytes_w7(const bench_sizes *s) {
  return F4 * (2 * (double)s->sq * (double)s->sq + (double)s->sq);
}

/* ---- W7r: W7 at a ragged size, (sq-1) x (sq-1): not a multiple of the
 * 16-element tile nor of a cache line. */
static double bytes_w7r(const bench_sizes *s) {
  double m = (double)s->sq - 1;
  return F4 * (2 * m * m + m);
}

/* ---- W7b: batched, a [4, sq/2, sq/2] with its last two dims swapped,
 * + b[None, :] -> row-major [4, sq/2, sq/2] (the bytes of W7). */
static kiln_tensor *build_w7b(kiln_tensor **in) {
  kiln_scope_begin();
  kiln_tensor *y = BK(kiln_add(BK(kiln_transpose(in[0], 1, 2)), BK(kiln_unsqueeze(in[1], 0))));
  kiln_keep(y);
  kiln_scope_end();
  return y;
}
static double bytes_w7b(const bench_sizes *s) {
  double h = (double)(s->sq / 2);
  return F4 * (2 * 4 * h * h + h);
}


/* ---------------------------------------------------------- checks */

static double check_w1(const bench_sizes *s, kiln_tensor **in, kiln_tensor *y) {
  const float *a = host(in[0]), *b = host(in[1]), *c = host(in[2]), *d = host(in[3]);
  double worst = 0;
  for (int k = 0; k < SAMPLES; k++) {
    int64_t i = spread(k, s->n);
    double want = fmax((double)a[i] * b[i] + c[i], 0) / (1 + exp(-(double)d[i]));
    worst = fmax(worst, err(at1(y, i), want, 1e-6, 1e-5));
  }
  return worst;
}

static double check_w2(const bench_sizes *s, kiln_tensor **in, kiln_tensor *y) {
  const float *x = host(in[0]);
  double worst = 0;
  for (int k = 0; k < SAMPLES; k++) {
    int64_t i = spread(k, s->n);
    double want = x[i];
    for (int r = 0; r < 10; r++) want = tanh(want * 1.0001 + 0.5);
    worst = fmax(worst, err(at1(y, i), want, 1e-6, 1e-5));
  }
  return worst;
}

/* F32 sums of many elements: 1e-3 relative, generous for any sane order. */
static double check_w3a(const bench_sizes *s, kiln_tensor **in, kiln_tensor *y) {
  const float *x = host(in[0]);
  double want = 0;
  for (int64_t i = 0; i < s->n; i++) want += x[i];
  double got = kiln_item(y);
  bench_check(true, "kiln_item(output)", __LINE__);
  return err(got, want, 1e-6, 1e-3);
}

static double check_w3b(const bench_sizes *s, kiln_tensor **in, kiln_tensor *y) {
  const float *x = host(in[0]);
  double worst = 0;
  for (int k = 0; k < SAMPLES; k++) {
    int64_t j = spread(k, s->sq);
    double want = 0;
    for (int64_t i = 0; i < s->sq; i++) want += x[i * s->sq + j];
    worst = fmax(worst, err(at1(y, j), want, 1e-6, 1e-4));
  }
  return worst;
}

static double check_w3c(const bench_sizes *s, kiln_tensor **in, kiln_tensor *y) {
  const float *x = host(in[0]);
  double worst = 0;
  for (int k = 0; k < SAMPLES; k++) {
    int64_t i = spread(k, s->sq);
    double want = 0;
    for (int64_t j = 0; j < s->sq; j++) want += x[i * s->sq + j];
    worst = fmax(worst, err(at1(y, i), want, 1e-6, 1e-4));
  }
  return worst;
}

static double check_w4(const bench_sizes *s, kiln_tensor **in, kiln_tensor *y) {
  const float *x = host(in[0]);
  int64_t n = s->sq;
  double worst = 0;
  for (int k = 0; k < SAMPLES; k++) {
    int64_t i = spread(k, n), j = (k * 37 + 11) % n;
    const float *row = x + i * n;
    double m = row[0], sum = 0;
    for (int64_t c = 1; c < n; c++) m = fmax(m, row[c]);
    for (int64_t c = 0; c < n; c++) sum += exp(row[c] - m);
    worst = fmax(worst, err(at2(y, i, j), exp(row[j] - m) / sum, 1e-9, 1e-4));
  }
  return worst;
}

static double check_w5(const bench_sizes *s, kiln_tensor **in, kiln_tensor *y) {
  const float *x = host(in[0]);
  int64_t n = s->ln_cols;
  double worst = 0;
  for (int k = 0; k < SAMPLES; k++) {
    int64_t i = spread(k, s->ln_rows), j = (k * 37 + 11) % n;
    const float *row = x + i * n;
    double mu = 0, var = 0;
    for (int64_t c = 0; c < n; c++) mu += row[c];
    mu /= (double)n;
    for (int64_t c = 0; c < n; c++) var += (row[c] - mu) * (row[c] - mu);
    var /= (double)n;
    worst = fmax(worst, err(at2(y, i, j), (row[j] - mu) / sqrt(var + 1e-5), 1e-4, 1e-4));
  }
  return worst;
}

static double check_w7n(int64_t n, kiln_tensor **in, kiln_tensor *y) {
  const float *a = host(in[0]), *b = host(in[1]);
  double worst = 0;
  for (int k = 0; k < SAMPLES; k++) {
    int64_t i = spread(k, n), j = (k * 37 + 11) % n;
    worst = fmax(worst, err(at2(y, i, j), (double)a[j * n + i] + b[j], 1e-7, 1e-6));
  }
  return worst;
}
static double check_w7(const bench_sizes *s, kiln_tensor **in, kiln_tensor *y) { return check_w7n(s->sq, in, y); }
static double check_w7r(const bench_sizes *s, kiln_tensor **in, kiln_tensor *y) {
  return check_w7n(s->sq - 1, in, y);
}

static double check_w7b(const bench_sizes *s, kiln_tensor **in, kiln_tensor *y) {
  const float *a = host(in[0]), *b = host(in[1]);
  int64_t h = s->sq / 2;
  double worst = 0;
  for (int k = 0; k < SAMPLES; k++) {
    int64_t t = k % 4, i = spread(k, h), j = (k * 37 + 11) % h;
    double got = kiln_get(y, (int64_t[]){t, i, j});
    bench_check(true, "kiln_get(output)", __LINE__);
    worst = fmax(worst, err(got, (double)a[(t * h + j) * h + i] + b[j], 1e-7, 1e-6));
  }
  return worst;
}

/* ---- K1: one k-means step on K1_POINTS 2-D points [P, 2] and K1_K
 * centroids [K, 2]: assign each point to its nearest centroid (squared
 * distances, argmin: first of equal ones), then the new centroids are the
 * mean of their points — sums and counts by index_add_ (a scatter-add
 * with heavily duplicated indices), divided; an empty cluster keeps a
 * count of 1 (sum 0). index_add_ forces the assignment (its index). */
#define K1_POINTS 20000
#define K1_K 8

static void setup_k1(const bench_sizes *s, kiln_tensor **in) {
  in[0] = input(2, (int64_t[]){K1_POINTS, 2});
  in[1] = input(2, (int64_t[]){K1_K, 2});
}

static kiln_tensor *build_k1(kiln_tensor **in) {
  kiln_scope_begin();
  kiln_tensor *x = in[0], *c = in[1];
  kiln_tensor *diff = BK(kiln_sub(BK(kiln_unsqueeze(x, 1)), BK(kiln_unsqueeze(c, 0)))); /* [P, K, 2] */
  kiln_tensor *d = BK(kiln_sum(BK(kiln_mul(diff, diff)), 1, (int[]){2}, false));
  kiln_tensor *a = BK(kiln_argmin(d, 1, false));
  kiln_tensor *sums = BK(kiln_zeros(KILN_F32, 2, (int64_t[]){K1_K, 2}));
  kiln_tensor *counts = BK(kiln_zeros(KILN_F32, 1, (int64_t[]){K1_K}));
  BKS(kiln_index_add_(sums, 0, a, x));
  BKS(kiln_index_add_(counts, 0, a, BK(kiln_ones(KILN_F32, 1, (int64_t[]){K1_POINTS}))));
  kiln_tensor *y = BK(kiln_div(sums, BK(kiln_unsqueeze(BK(kiln_clamp(counts, 1, INFINITY)), 1))));
  kiln_keep(y);
  kiln_scope_end();
  return y;
}

/* Reads the points and centroids once. */
static double bytes_k1(const bench_sizes *s) { return (K1_POINTS + K1_K) * 2 * F4 + K1_K * 2 * F4; }

/* The reference in F32 as Kiln rounds it (differences, squares and the
 * two-term sum each rounded to F32), so the assignment is the same. */
static double check_k1(const bench_sizes *s, kiln_tensor **in, kiln_tensor *y) {
  const float *x = host(in[0]), *c = host(in[1]);
  double sums[K1_K][2] = {{0}}, counts[K1_K] = {0};
  for (int64_t i = 0; i < K1_POINTS; i++) {
    int best = 0;
    float best_d = INFINITY;
    for (int k = 0; k < K1_K; k++) {
      float dx = x[2 * i] - c[2 * k], dy = x[2 * i + 1] - c[2 * k + 1];
      float dd = dx * dx + dy * dy;
      if (dd < best_d) best_d = dd, best = k;
    }
    sums[best][0] += x[2 * i], sums[best][1] += x[2 * i + 1], counts[best] += 1;
  }
  double worst = 0;
  for (int k = 0; k < K1_K; k++)
    for (int j = 0; j < 2; j++)
      worst = fmax(worst, err(at2(y, k, j), sums[k][j] / fmax(counts[k], 1), 1e-6, 1e-5));
  return worst;
}

const bench_workload bench_workloads[] = {
    {"W1", "W1", "relu(a*b + c) * sigmoid(d), n", "1 kernel, >=0.9x triad", 1, 0.9, 0, setup_vec4, build_w1,
     bytes_w1, check_w1, 0, false, NULL, 0, 0},
    {"W2", "W2", "10 x (y = tanh(y*1.0001 + 0.5)), n", "1 kernel, >=5x NumPy", 1, 0, 5, setup_vec1, build_w2,
     bytes_w2, check_w2, 0, false, NULL, 0, 0},
    {"W3a", "W3", "sum of n", ">=0.9x read, >= Torch", 0, 0.9, 0, setup_vec1, build_w3a, bytes_w3a, check_w3a, 1,
     true, NULL, 0, 0},
    {"W3b", "W3", "sum over dim 0 of sq x sq", ">=0.9x read, >= Torch", 0, 0.9, 0, setup_sq, build_w3b, bytes_w3bc,
     check_w3b, 1, true, NULL, 0, 0},
    {"W3c", "W3", "sum over dim 1 of sq x sq", ">=0.9x read, >= Torch", 0, 0.9, 0, setup_sq, build_w3c, bytes_w3bc,
     check_w3c, 1, true, NULL, 0, 0},
    {"W4", "W4", "softmax over rows of sq x sq", "1 kernel, >=0.7x triad", 1, 0.7, 0, setup_sq, build_w4,
     bytes_sq2, check_w4, 0, false, NULL, 0, 0},
    {"W5", "W5", "layer norm over last dim of R x C", "1 kernel, >=0.7x triad", 1, 0.7, 0, setup_ln, build_w5,
     bytes_w5, check_w5, 0, false, NULL, 0, 0},
    {"W7", "W7", "a.T + b[None, :], sq x sq", ">=0.7x triad", 0, 0.7, 0, setup_w7, build_w7, bytes_w7, check_w7, 0, false, NULL, 0, 0},
    {"W7r", "W7", "a.T + b[None, :], (sq-1) x (sq-1)", ">=0.7x triad", 0, 0.7, 0, setup_w7r, build_w7, bytes_w7r,
     check_w7r, 0, false, NULL, 0, 0},
    {"W7b", "W7", "a.transpose(1, 2) + b[None, :], 4 x sq/2 x sq/2", ">=0.7x triad", 0, 0.7, 0, setup_w7b, build_w7b,
     bytes_w7b, check_w7b, 0, false, NULL, 0, 0},
    {"K1", "K1", "k-means step, 20000 2-D points, 8 clusters (index_add_)", ">= NumPy and Torch", 0, 0, 1, setup_k1,
     build_k1, bytes_k1, check_k1, 1, false, NULL, 0, 0},
};
const int bench_n_workloads = (int)(sizeof bench_workloads / sizeof bench_workloads[0]);

const bench_workload *bench_find(const char *id) {
  for (int i = 0; i < bench_n_workloads; i++)
    if (strcmp(bench_workloads[i].id, id) == 0) return &bench_workloads[i];
  return NULL;
}

/* ---- W8: a chain of tiny ops on x [tiny]; op i is
 *   i%4 == 0: y*1.0001   1: y + x   2: tanh(y)   3: y - 0.25
 * Figures: µs to record one op; µs per kernel when the forced chain is
 * recorded and forced again (every kernel then a cache hit). */
kiln_tensor *bench_w8_chain(kiln_tensor *x, int chain) {
  kiln_scope_begin();
  kiln_tensor *y = x;
  for (int i = 0; i < chain; i++) {
    switch (i % 4) {
    case 0: y = BK(kiln_mul_scalar(y, 1.0001)); break;
    case 1: y = BK(kiln_add(y, x)); break;
    case 2: y = BK(kiln_tanh(y)); break;
    default: y = BK(kiln_sub_scalar(y, 0.25)); break;
    }
  }
  kiln_keep(y);
  kiln_scope_end();
  return y;
}

double bench_w8_check(kiln_tensor *x, kiln_tensor *y, int chain) {
  const float *xs = host(x);
  int64_t n = kiln_numel(x);
  double worst = 0;
  for (int k = 0; k < SAMPLES; k++) {
    int64_t i = spread(k, n);
    double v = xs[i];
    for (int op = 0; op < chain; op++) {
      switch (op % 4) {
      case 0: v *= 1.0001; break;
      case 1: v += xs[i]; break;
      case 2: v = tanh(v); break;
      default: v -= 0.25; break;
      }
    }
    worst = fmax(worst, err(at1(y, i), v, 1e-5, 1e-4));
  }
  return worst;
}
