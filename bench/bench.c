/*
 * bench.c — kiln_bench: times Kiln on fixed workloads and compares each,
 * in the same run, with the machine's memory-bandwidth limit (a STREAM-style
 * triad measured here), NumPy and PyTorch (bench/peers.py, run through
 * /usr/bin/python3). Figures are printed, never asserted.
 *
 *   kiln_bench [--quick] [--only W1,W4,...] [--threads N] [--no-peers] [--json FILE]
 *
 * Method, per workload: inputs are created and realized first; one warm-up
 * run (records + forces, compiles); one profiled run (kernel count, bytes
 * the kernels report); then more runs up to a time budget (at least 3); the
 * figure is the median wall time of record + kiln_realize. Ratios:
 *   x limit = Kiln GB/s / limit GB/s  (fraction of the bandwidth limit:
 *             the triad, or for rows that only read, the read roofline,
 *             each measured just before and just after the row: the
 *             better of the two)
 *   x NumPy = NumPy s / Kiln s        (> 1: Kiln is faster), same for Torch
 * C1 runs this program again as a child (--c1-child) so its first forces
 * happen in a fresh process with an empty kernel cache (C1-*: an empty
 * on-disk cache too; C1w-*: the on-disk cache the C1 run filled).
 * The GEMM rows (G1-G5, gemm.c) are compute-bound: their rate is GFLOP/s,
 * their limit the compute roofline (peak.c) measured just before and
 * after each, and they are also compared with OpenBLAS called directly,
 * here and in a child without OPENBLAS_CORETYPE (--blas-child).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "bench.h"

#ifndef KILN_BENCH_DIR
#define KILN_BENCH_DIR "bench"
#endif
#define PEERS_PYTHON "/usr/bin/python3"
#define TRIAD_THREADS 2
#define MAX_RUNS 4096

/* ------------------------------------------------------------- helpers */

void bench_check(bool ok, const char *what, int line) {
  if (ok && kiln_last_status() == KILN_OK) return;
  kiln_status st = kiln_last_status();
  fprintf(stderr, "kiln_bench: %s failed (line %d): %s: %s\n", what, line,
          st == KILN_OK ? "no Kiln error recorded" : kiln_status_name(st), kiln_last_error());
  exit(1);
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* Median of v[n] (sorts v). */
static int64_t median_ns(int64_t *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_i64);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Runs to take: enough to fill `budget_ns` given one run of `one_ns`,
 * clamped to [lo, hi]. */
static int runs_for(int64_t one_ns, int64_t budget_ns, int lo, int hi) {
  int64_t r = one_ns > 0 ? budget_ns / one_ns : hi;
  return r < lo ? lo : r > hi ? hi : (int)r;
}

/* ------------------------------------------------------------ profiler */

/* What the profiler recorded over one forced run. */
typedef struct prof_sum {
  int kernels;
  int64_t compile_ns, run_ns, bytes; /* bytes read + written, as reported */
  int64_t load_ns;                    /* loading kernels from the on-disk cache */
  int threads;                        /* most threads any kernel used */
  int misses;                         /* kernels that were not cache hits */
  char names[160];                    /* first kernel names, comma separated */
} prof_sum;

static prof_sum prof_collect(void) {
  prof_sum p = {0};
  int n = kiln_profile_count();
  for (int i = 0; i < n; i++) {
    kiln_kernel_record r;
    BKS(kiln_profile_get(i, &r));
    p.kernels++;
    p.compile_ns += r.compile_ns;
    p.load_ns += r.load_ns;
    p.run_ns += r.run_ns;
    p.bytes += r.bytes_read + r.bytes_written;
    if (r.threads > p.threads) p.threads = r.threads;
    if (!r.cache_hit) p.misses++;
    size_t len = strlen(p.names);
    if (i < 4 && len + 2 < sizeof p.names)
      snprintf(p.names + len, sizeof p.names - len, "%s%s", i ? "," : "", r.name ? r.name : "?");
    else if (i == 4 && len + 4 < sizeof p.names)
      snprintf(p.names + len, sizeof p.names - len, ",...");
  }
  return p;
}

/* --------------------------------------------------------------- rows */

/* One line of the table. NAN marks a figure that does not apply or was
 * not measured. */
typedef struct row {
  char id[12];
  const char *target;
  double ms;      /* Kiln median wall time */
  double rate;    /* GB/s; W8: µs; C1: compile ms */
  int kernels;    /* -1: n/a */
  double x_triad; /* Kiln GB/s / limit GB/s (read roofline for read_only rows) */
  double limit_gbs, limit_before, limit_after; /* the row's limit: the better of before and after */
  bool read_only;
  bool reference; /* a hand-written reference, not Kiln: no target */
  double kiln_s;  /* Kiln seconds compared with the peers */
  double numpy_s, torch_s;
  /* targets */
  int want_kernels;
  double min_triad, min_numpy, min_torch;
  double check_val, check_max; /* another "value <= max" target, NAN = none */
  bool check_ok;               /* a further condition that must hold */
  double wrong;                /* result check error in tolerance units; > 1: wrong */
  /* GEMM rows: rate is GFLOP/s and the limit (limit_*) the compute
   * roofline in GFLOP/s; OpenBLAS called directly here (as configured)
   * and in the child (its own kernel choice), in seconds; G4: check_val
   * is the epilogue's cost over G1 in % */
  bool compute;
  double gflop; /* FLOP of one run / 1e9 */
  double blas_s, blas_child_s;
  char blas_core[24], blas_child_core[24];
  double min_blas;
  char detail[640];
} row;

static row rows[48]; /* a full run makes 27 */
static int n_rows;

static row *new_row(const char *id, const char *target) {
  row *r = &rows[n_rows++];
  memset(r, 0, sizeof *r);
  snprintf(r->id, sizeof r->id, "%s", id);
  r->target = target;
  r->ms = r->rate = r->x_triad = r->kiln_s = r->numpy_s = r->torch_s = NAN;
  r->gflop = r->blas_s = r->blas_child_s = NAN;
  r->limit_gbs = r->limit_before = r->limit_after = NAN;
  r->check_val = r->check_max = NAN;
  r->kernels = -1;
  r->check_ok = true;
  r->wrong = 0;
  return r;
}

/* The faster peer of a row and Kiln's speedup over it (peer time / Kiln
 * time); NULL and NAN when neither peer ran. */
static const char *best_peer(const row *r, double *ratio) {
  bool np = !isnan(r->numpy_s), to = !isnan(r->torch_s);
  *ratio = NAN;
  if (!np && !to) return NULL;
  bool torch = to && (!np || r->torch_s < r->numpy_s);
  *ratio = (torch ? r->torch_s : r->numpy_s) / r->kiln_s;
  return torch ? "Torch" : "NumPy";
}

/* A GEMM row's best OpenBLAS time (the faster of the configured kernel
 * and the child's) and Kiln's speedup over it (NAN when neither ran). */
static double best_blas(const row *r, double *ratio) {
  double best = isnan(r->blas_child_s) || r->blas_s < r->blas_child_s ? r->blas_s : r->blas_child_s;
  *ratio = best / r->kiln_s;
  return best;
}

/* "yes", "no", "n/a" when a figure a target needs is missing, or "WRONG"
 * when the result check failed. */
static const char *met(const row *r) {
  if (!(r->wrong <= 1)) return "WRONG";
  if (r->reference) return "-";
  bool ok = r->check_ok, missing = false;
  if (r->want_kernels) ok = ok && r->kernels == r->want_kernels;
  if (r->min_triad > 0) {
    if (isnan(r->x_triad)) missing = true;
    else ok = ok && r->x_triad >= r->min_triad;
  }
  if (r->min_numpy > 0) {
    if (isnan(r->numpy_s)) missing = true;
    else ok = ok && r->numpy_s / r->kiln_s >= r->min_numpy;
  }
  if (r->min_torch > 0) {
    if (isnan(r->torch_s)) missing = true;
    else ok = ok && r->torch_s / r->kiln_s >= r->min_torch;
  }
  if (r->min_blas > 0) {
    double x;
    best_blas(r, &x);
    if (isnan(x) || isnan(r->blas_child_s)) missing = true;
    if (!isnan(x)) ok = ok && x >= r->min_blas;
  }
  if (!isnan(r->check_max)) {
    if (isnan(r->check_val)) missing = true;
    else ok = ok && r->check_val <= r->check_max;
  }
  return !ok ? "no" : missing ? "n/a" : "yes";
}

/* ------------------------------------------------------------ options */

typedef struct options {
  bool quick, no_peers, c1_child, blas_child;
  int threads;      /* 0: engine default */
  const char *only; /* NULL: all */
  const char *json; /* NULL: no JSON output */
} options;

static bench_sizes sizes_for(bool quick) {
  if (quick) return (bench_sizes){.n = 1 << 16, .sq = 256, .ln_rows = 512, .ln_cols = 128, .tiny = 1000,
                                  .chain = 100, .triad_n = (int64_t)1 << 24, .gemm = 256, .conv_cols = 4 * 14 * 14,
                                  .mlp_batch = 128};
  return (bench_sizes){.n = 1 << 24, .sq = 4096, .ln_rows = 8192, .ln_cols = 1024, .tiny = 1000, .chain = 100,
                       .triad_n = (int64_t)1 << 25, .gemm = 2048, .conv_cols = 128 * 14 * 14, .mlp_batch = 128};
}

bool bench_selected(const char *only, const char *group, const char *id) {
  if (!only) return true;
  const char *p = only;
  while (*p) {
    size_t len = strcspn(p, ",");
    if ((len == strlen(group) && strncmp(p, group, len) == 0) || (len == strlen(id) && strncmp(p, id, len) == 0))
      return true;
    p += len;
    if (*p == ',') p++;
  }
  return false;
}

/* True when --only names `group` (or the row id itself). */
static bool selected(const options *o, const char *group, const char *id) {
  return bench_selected(o->only, group, id);
}

static void usage(FILE *f) {
  fprintf(f, "usage: kiln_bench [--quick] [--only W1,W2,W3,W4,W5,W7,K1,G1,G2,G3,G4,G5,W8,C1] [--threads N] [--no-peers] "
             "[--json FILE]\n"
             "  --quick     small sizes: a smoke run of a few seconds\n"
             "  --only L    comma-separated workloads (W3 = W3a,W3b,W3c; W7 = W7,W7r,W7b,W7-hand,W7r-hand; "
             "G3 = G3a,G3b,G3c)\n"
             "  --threads N kiln_set_num_threads(N) (default: the engine's own)\n"
             "  --no-peers  skip NumPy/PyTorch (bench/peers.py)\n"
             "  --json FILE also write every figure to FILE (bench/compare.py compares two)\n");
}

static options parse(int argc, char **argv) {
  options o = {0};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--quick") == 0) o.quick = true;
    else if (strcmp(a, "--no-peers") == 0) o.no_peers = true;
    else if (strcmp(a, "--c1-child") == 0) o.c1_child = true;
    else if (strcmp(a, "--blas-child") == 0) o.blas_child = true;
    else if (strcmp(a, "--only") == 0 && i + 1 < argc) o.only = argv[++i];
    else if (strcmp(a, "--json") == 0 && i + 1 < argc) o.json = argv[++i];
    else if (strcmp(a, "--threads") == 0 && i + 1 < argc) {
      char *end;
      long v = strtol(argv[++i], &end, 10);
      if (*end || v < 1 || v > 1024) {
        fprintf(stderr, "kiln_bench: --threads wants a count >= 1, got \"%s\"\n", argv[i]);
        exit(2);
      }
      o.threads = (int)v;
    } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      exit(0);
    } else {
      fprintf(stderr, "kiln_bench: unknown or incomplete argument \"%s\"\n", a);
      usage(stderr);
      exit(2);
    }
  }
  return o;
}

/* ----------------------------------------------------------- W1..W7 */

/* One timed run: record + force; after the clock stops the result is
 * checked when `err` is not NULL, then released. */
static int64_t one_run(const bench_workload *w, const bench_sizes *s, kiln_tensor **in, double *err) {
  kiln_scope_begin();
  int64_t t0 = bench_now_ns();
  kiln_tensor *y = w->build(in);
  BKS(kiln_realize(y));
  int64_t dt = bench_now_ns() - t0;
  if (err) *err = w->check(s, in, y);
  kiln_scope_end();
  return dt;
}

static row *measure(const bench_workload *w, const bench_sizes *s, int64_t budget_ns, int max_runs) {
  fprintf(stderr, "kiln_bench: %s ...\n", w->id);
  static int64_t t[MAX_RUNS];
  kiln_scope_begin();
  kiln_tensor *in[BENCH_MAX_INPUTS] = {0};
  w->setup(s, in);

  double wrong = 0;
  kiln_profile_begin(); /* warm-up: the first force compiles */
  int64_t first = one_run(w, s, in, &wrong);
  kiln_profile_end();
  prof_sum p0 = prof_collect();

  kiln_profile_begin(); /* profiled run: kernel count; also a sample */
  t[0] = one_run(w, s, in, NULL);
  kiln_profile_end();
  prof_sum p = prof_collect();

  int runs = runs_for(t[0], budget_ns, 3, max_runs);
  for (int r = 1; r < runs; r++) t[r] = one_run(w, s, in, NULL);
  kiln_scope_end();
  int64_t lo = t[0], hi = t[0];
  for (int r = 1; r < runs; r++) {
    if (t[r] < lo) lo = t[r];
    if (t[r] > hi) hi = t[r];
  }
  int64_t med = median_ns(t, runs);

  row *rw = new_row(w->id, w->target);
  double bytes = w->bytes(s);
  rw->ms = (double)med / 1e6;
  rw->kiln_s = (double)med / 1e9;
  rw->rate = bytes / (double)med;
  if (w->gemm) { /* compute-bound: GFLOP/s; ideal bytes: each operand once */
    bench_gemm g = w->gemm(s);
    bytes = 4.0 * (double)(g.m * g.k + g.k * g.n + g.m * g.n + (g.epilogue ? g.n : 0));
    rw->compute = true;
    rw->gflop = 2.0 * (double)g.m * (double)g.n * (double)g.k / 1e9;
    rw->rate = rw->gflop * 1e9 / (double)med;
    rw->min_blas = w->min_blas;
  }
  rw->kernels = p.kernels;
  rw->read_only = w->read_only;
  rw->want_kernels = w->want_kernels;
  rw->min_triad = w->min_triad;
  rw->min_numpy = w->min_numpy;
  rw->min_torch = w->min_torch;
  rw->wrong = wrong;
  snprintf(rw->detail, sizeof rw->detail,
           "%s; check %.2g; %d runs, min/med/max %.3f/%.3f/%.3f ms; first force %.1f ms (compile %.1f ms, %d kernels "
           "compiled); kernels move %.1f MB vs %.1f MB ideal; kernel threads %d; kernels: %s",
           w->what, wrong, runs, (double)lo / 1e6, (double)med / 1e6, (double)hi / 1e6, (double)first / 1e6,
           (double)p0.compile_ns / 1e6, p0.misses, (double)p.bytes / 1e6, bytes / 1e6, p.threads, p.names);
  return rw;
}

/* ------------------------------------------------------ W7-hand, W7r-hand */

/* Reference rows for W7 (n = sq) and W7r (n = sq - 1): the same
 * computation written by hand with AVX-512 (w7_hand.c), on as many
 * threads as Kiln runs with (--threads, else the triad's 2), so the table
 * shows how much of a gap is the shape and how much is Kiln. A machine
 * without AVX-512F prints no such row. */
static row *measure_hand(const char *id, int64_t n, int threads, int max_runs) {
  fprintf(stderr, "kiln_bench: %s ...\n", id);
  int64_t med, lo;
  double wrong;
  int rc = bench_w7_hand(n, threads, max_runs, &med, &lo, &wrong);
  if (rc == -1) {
    fprintf(stderr, "kiln_bench: %s skipped (needs x86-64 with AVX-512F)\n", id);
    return NULL;
  }
  bench_check(rc == 0, "bench_w7_hand (out of memory?)", __LINE__);
  row *rw = new_row(id, "- (reference: hand-written AVX-512)");
  rw->reference = true;
  double bytes = 4.0 * (2 * (double)n * (double)n + (double)n);
  rw->ms = (double)med / 1e6;
  rw->rate = bytes / (double)med;
  rw->wrong = wrong;
  snprintf(rw->detail, sizeof rw->detail,
           "hand-written AVX-512 a.T + b[None, :], %lld x %lld (bench/w7_hand.c); check %.2g; %d runs, min/med "
           "%.3f/%.3f ms; %d threads",
           (long long)n, (long long)n, wrong, max_runs, (double)lo / 1e6, (double)med / 1e6, threads);
  return rw;
}

/* ----------------------------------------------------------------- W8 */

static void measure_w8(const bench_sizes *s, int64_t budget_ns) {
  fprintf(stderr, "kiln_bench: W8 ...\n");
  static int64_t rec[MAX_RUNS], run[MAX_RUNS], tot[MAX_RUNS], over[MAX_RUNS];
  kiln_scope_begin();
  kiln_tensor *x = BK(kiln_rand(KILN_F32, 1, (int64_t[]){s->tiny}));
  BKS(kiln_realize(x));

  kiln_scope_begin(); /* forced once: compiles */
  kiln_profile_begin();
  int64_t t0 = bench_now_ns();
  kiln_tensor *y0 = bench_w8_chain(x, s->chain);
  BKS(kiln_realize(y0));
  int64_t first = bench_now_ns() - t0;
  kiln_profile_end();
  prof_sum p0 = prof_collect();
  double wrong = bench_w8_check(x, y0, s->chain);
  kiln_scope_end();

  kiln_scope_begin(); /* a profiled repeat: kernel count, cache hits */
  kiln_profile_begin();
  BKS(kiln_realize(bench_w8_chain(x, s->chain)));
  kiln_profile_end();
  prof_sum p = prof_collect();
  kiln_scope_end();

  int runs = 0;
  int64_t spent = 0;
  while (runs < MAX_RUNS && (runs < 20 || spent < budget_ns)) {
    kiln_scope_begin();
    kiln_profile_begin();
    int64_t a = bench_now_ns();
    kiln_tensor *y = bench_w8_chain(x, s->chain); /* record, incl. releasing intermediates */
    int64_t b = bench_now_ns();
    BKS(kiln_realize(y));
    int64_t c = bench_now_ns();
    kiln_profile_end();
    kiln_scope_end();
    prof_sum pr = prof_collect();
    rec[runs] = b - a;
    run[runs] = c - b;
    tot[runs] = c - a;
    /* what forcing adds around the kernels' own run time, per kernel */
    over[runs] = pr.kernels ? (c - b - pr.run_ns) / pr.kernels : 0;
    spent += c - a;
    runs++;
  }
  kiln_scope_end();
  double rec_us = (double)median_ns(rec, runs) / 1e3, run_us = (double)median_ns(run, runs) / 1e3;
  double tot_us = (double)median_ns(tot, runs) / 1e3, over_us = (double)median_ns(over, runs) / 1e3;

  row *r = new_row("W8rec", "<=0.5 us to record an op");
  r->ms = rec_us / 1e3;
  r->rate = rec_us / s->chain;
  r->check_val = r->rate;
  r->check_max = 0.5;
  snprintf(r->detail, sizeof r->detail,
           "%d chained ops on %lld elements; median time to record the whole chain %.1f us (%d runs), "
           "%.3f us per op (includes releasing intermediate handles at scope end)",
           s->chain, (long long)s->tiny, rec_us, runs, r->rate);

  r = new_row("W8run", "<=5 us force overhead per kernel, repeat");
  r->ms = tot_us / 1e3;
  r->kiln_s = tot_us / 1e6;
  r->kernels = p.kernels;
  r->rate = p.kernels ? over_us : NAN;
  r->check_val = r->rate;
  r->check_max = 5.0;
  r->check_ok = p.misses == 0;
  r->wrong = wrong;
  snprintf(r->detail, sizeof r->detail,
           "check %.2g; Kiln ms = record + force of the chain (median, %d runs); force alone %.1f us for %d kernels "
           "= %.2f us per kernel, of which %.2f us is not the kernels' own run time (profiler run_ns); "
           "%d cache misses on repeat; first force %.2f ms (compile %.2f ms)",
           wrong, runs, run_us, p.kernels, p.kernels ? run_us / p.kernels : NAN, over_us, p.misses,
           (double)first / 1e6, (double)p0.compile_ns / 1e6);
}

/* ----------------------------------------------------------------- C1 */

/* The time to write a fresh anonymous mapping of `bytes` once (memset, one
 * thread), mapped as Kiln's allocator maps large buffers (2 MiB aligned,
 * MADV_HUGEPAGE): what the machine charges for first-touch page faults of
 * a new output now, with no Kiln code involved. -1 when mmap fails. */
static int64_t fresh_touch_ns(size_t bytes) {
  size_t align = (size_t)2 << 20, len = bytes + align;
  char *raw = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return -1;
  char *p = (char *)(((uintptr_t)raw + align - 1) & ~(uintptr_t)(align - 1));
  madvise(p, bytes, MADV_HUGEPAGE);
  int64_t t0 = bench_now_ns();
  memset(p, 1, bytes);
  int64_t dt = bench_now_ns() - t0;
  munmap(raw, len);
  return dt;
}

/* Child side: first and second force of W1, W4, W5 in this fresh process;
 * one line per workload: "c1 ID first_ns compile_ns kernels second_ns
 * second_compile_ns second_misses load_ns run_ns second_run_ns touch_ns
 * touch_bytes" (load and run: the first force's, from the profiler;
 * touch: fresh_touch_ns of the output's size, after the forces). */
static void c1_child(const bench_sizes *s) {
  static const char *ids[] = {"W1", "W4", "W5"};
  for (int i = 0; i < 3; i++) {
    const bench_workload *w = bench_find(ids[i]);
    kiln_scope_begin();
    kiln_tensor *in[BENCH_MAX_INPUTS] = {0};
    w->setup(s, in);
    kiln_profile_begin();
    int64_t first = one_run(w, s, in, NULL);
    kiln_profile_end();
    prof_sum p1 = prof_collect();
    kiln_profile_begin();
    int64_t second = one_run(w, s, in, NULL);
    kiln_profile_end();
    prof_sum p2 = prof_collect();
    size_t out_bytes = (size_t)kiln_numel(in[0]) * sizeof(float); /* W1, W4, W5: output shaped as in[0] */
    kiln_scope_end();
    int64_t touch = fresh_touch_ns(out_bytes);
    printf("c1 %s %lld %lld %d %lld %lld %d %lld %lld %lld %lld %zu\n", ids[i], (long long)first,
           (long long)p1.compile_ns, p1.kernels, (long long)second, (long long)p2.compile_ns, p2.misses,
           (long long)p1.load_ns, (long long)p1.run_ns, (long long)p2.run_ns, (long long)touch, out_bytes);
  }
  fflush(stdout);
}

/* One C1 child run with KILN_CACHE_DIR=dir: rows "<prefix>-W1" ... .
 * Cold (an empty directory): W1's first-force overhead target is 20 ms;
 * warm (the directory the cold run filled): 5 ms, and no compile at all. */
static void run_c1(const options *o, const char *self, const char *dir, bool warm) {
  char cmd[4600];
  char thr[32] = "";
  if (o->threads) snprintf(thr, sizeof thr, " --threads %d", o->threads);
  snprintf(cmd, sizeof cmd, "KILN_CACHE_DIR='%s' '%s' --c1-child%s%s", dir, self, o->quick ? " --quick" : "", thr);
  FILE *f = popen(cmd, "r");
  if (!f) {
    fprintf(stderr, "kiln_bench: C1: cannot run %s\n", cmd);
    exit(1);
  }
  char line[512];
  int got = 0;
  while (fgets(line, sizeof line, f)) {
    char id[8];
    long long first, comp, second, comp2, load, run1, run2, touch;
    size_t touch_bytes;
    int kernels, misses2;
    if (sscanf(line, "c1 %7s %lld %lld %d %lld %lld %d %lld %lld %lld %lld %zu", id, &first, &comp, &kernels,
               &second, &comp2, &misses2, &load, &run1, &run2, &touch, &touch_bytes) != 12)
      continue;
    got++;
    char rid[12];
    snprintf(rid, sizeof rid, "%s-%s", warm ? "C1w" : "C1", id);
    bool w1 = strcmp(id, "W1") == 0;
    row *r = new_row(rid, warm ? (w1 ? "disk cache: overhead <=5ms, no compile" : "disk cache: no compile")
                               : (w1 ? "1st-force overhead <=20ms; hit: no compile" : "cache hit: no compile"));
    r->ms = (double)first / 1e6;
    r->rate = (double)comp / 1e6;
    r->kernels = kernels;
    double overhead_ms = (double)(first - second) / 1e6;
    if (w1) {
      r->check_val = overhead_ms;
      r->check_max = warm ? 5.0 : 20.0;
    }
    r->check_ok = comp2 == 0 && misses2 == 0 && (!warm || comp == 0);
    snprintf(r->detail, sizeof r->detail,
             "fresh process, %s disk cache, inputs realized first: first force %.2f ms = compile %.2f + disk load "
             "%.2f + kernel run %.2f + rest %.2f (profiler); second force %.2f ms (run %.2f, compile %.2f ms, %d "
             "cache misses); overhead of the first force %.2f ms; the first touch of a fresh %zu MiB mapping in "
             "this process, no Kiln code (memset, 1 thread, after the forces): %.2f ms",
             warm ? "warm" : "empty", (double)first / 1e6, (double)comp / 1e6, (double)load / 1e6,
             (double)run1 / 1e6, (double)(first - comp - load - run1) / 1e6, (double)second / 1e6,
             (double)run2 / 1e6, (double)comp2 / 1e6, misses2, overhead_ms, touch_bytes >> 20, (double)touch / 1e6);
  }
  int rc = pclose(f);
  if (rc != 0 || got != 3) {
    fprintf(stderr, "kiln_bench: C1: the child run failed (status %d, %d of 3 results)\n", rc, got);
    exit(1);
  }
}

/* C1 in a private on-disk kernel cache (docs/cache.md): empty, then warm;
 * the user's cache is neither read nor written. */
static void measure_c1(const options *o) {
  fprintf(stderr, "kiln_bench: C1 (fresh process) ...\n");
  char self[4096];
  ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (len <= 0) {
    fprintf(stderr, "kiln_bench: C1: cannot find this program (/proc/self/exe): %s\n", strerror(errno));
    exit(1);
  }
  self[len] = 0;
  char dir[] = "/tmp/kiln_bench_c1_XXXXXX", rm[64];
  if (!mkdtemp(dir)) {
    fprintf(stderr, "kiln_bench: C1: cannot create a temporary directory: %s\n", strerror(errno));
    exit(1);
  }
  run_c1(o, self, dir, false);
  run_c1(o, self, dir, true);
  snprintf(rm, sizeof rm, "rm -rf '%s'", dir);
  if (system(rm) != 0) fprintf(stderr, "kiln_bench: C1: cannot remove %s\n", dir);
}

/* -------------------------------------------------------------- peers */

static char peer_notes[4][200];
static int n_peer_notes;
static char gemm_note[200]; /* the GEMM rows' roofline and OpenBLAS setup, if they ran */

/* Runs bench/peers.py once for every selected row and stores its times
 * in the rows. peers.py prints "result PEER ID SECONDS RUNS" and
 * "note TEXT" lines; anything else is ignored. */
static void run_peers(const options *o, const bench_sizes *s) {
  const char *py = getenv("KILN_BENCH_PYTHON");
  if (!py || !*py) py = PEERS_PYTHON;
  char ids[256] = "";
  for (int i = 0; i < n_rows; i++) {
    const char *id = rows[i].id;
    if (strncmp(id, "C1", 2) == 0 || strcmp(id, "W8rec") == 0) continue;
    if (strcmp(id, "W8run") == 0) id = "W8";
    size_t len = strlen(ids);
    snprintf(ids + len, sizeof ids - len, "%s%.11s", len ? "," : "", id);
  }
  if (!ids[0]) return;
  if (access(py, X_OK) != 0) {
    snprintf(peer_notes[n_peer_notes++], sizeof peer_notes[0], "%s not found: no NumPy/PyTorch figures", py);
    return;
  }
  fprintf(stderr, "kiln_bench: peers (%s %s/peers.py) ...\n", py, KILN_BENCH_DIR);
  char cmd[1024];
  snprintf(cmd, sizeof cmd,
           "'%s' '%s/peers.py' --only %s --n %lld --sq %lld --ln %lld %lld --tiny %lld --chain %d "
           "--gemm %lld --conv-cols %lld --mlp-batch %lld --budget %g --max-runs %d",
           py, KILN_BENCH_DIR, ids, (long long)s->n, (long long)s->sq, (long long)s->ln_rows,
           (long long)s->ln_cols, (long long)s->tiny, s->chain, (long long)s->gemm, (long long)s->conv_cols,
           (long long)s->mlp_batch, o->quick ? 0.2 : 2.0, o->quick ? 10 : 15);
  FILE *f = popen(cmd, "r");
  if (!f) {
    snprintf(peer_notes[n_peer_notes++], sizeof peer_notes[0], "could not start %s", py);
    return;
  }
  char line[512];
  while (fgets(line, sizeof line, f)) {
    char peer[16], id[16];
    double sec;
    int runs;
    if (sscanf(line, "result %15s %15s %lf %d", peer, id, &sec, &runs) == 4) {
      if (strcmp(id, "W8") == 0) strcpy(id, "W8run");
      for (int i = 0; i < n_rows; i++) {
        if (strcmp(rows[i].id, id) != 0) continue;
        if (strcmp(peer, "numpy") == 0) rows[i].numpy_s = sec;
        if (strcmp(peer, "torch") == 0) rows[i].torch_s = sec;
      }
    } else if (strncmp(line, "note ", 5) == 0 && n_peer_notes < 4) {
      line[strcspn(line, "\n")] = 0;
      snprintf(peer_notes[n_peer_notes++], sizeof peer_notes[0], "%.190s", line + 5);
    }
  }
  int rc = pclose(f);
  if (rc != 0 && n_peer_notes < 4)
    snprintf(peer_notes[n_peer_notes++], sizeof peer_notes[0], "peers.py exited with status %d", rc);
}

/* ---------------------------------------------------------------- load */

/* CPU seconds all processes used (/proc/stat, busy jiffies) and this
 * process with its children used (getrusage). Their difference over the run
 * is what other processes took: on a 2-core machine they take cores from
 * the 2-thread figures (triad, Torch, Kiln's pool), so the table shows it. */
static double machine_busy_s(void) {
  FILE *f = fopen("/proc/stat", "r");
  if (!f) return -1;
  unsigned long long v[8] = {0};
  int got = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
                   &v[6], &v[7]);
  fclose(f);
  if (got != 8) return -1;
  /* user nice system idle iowait irq softirq steal: all but idle, iowait */
  double busy = (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]);
  return busy / (double)sysconf(_SC_CLK_TCK);
}
static double own_cpu_s(void) {
  struct rusage self, kids;
  getrusage(RUSAGE_SELF, &self);
  getrusage(RUSAGE_CHILDREN, &kids);
  double s = 0;
  const struct rusage *r[2] = {&self, &kids};
  for (int i = 0; i < 2; i++)
    s += (double)r[i]->ru_utime.tv_sec + (double)r[i]->ru_utime.tv_usec / 1e6 + (double)r[i]->ru_stime.tv_sec +
         (double)r[i]->ru_stime.tv_usec / 1e6;
  return s;
}
static double busy0, own0;
static int64_t wall0;
static double others_cores = -1; /* mean cores other processes used */

static void load_mark_start(void) {
  busy0 = machine_busy_s();
  own0 = own_cpu_s();
  wall0 = bench_now_ns();
}
static void load_mark_end(void) {
  double busy = machine_busy_s(), wall = (double)(bench_now_ns() - wall0) / 1e9;
  if (busy0 >= 0 && busy >= 0 && wall > 0) {
    others_cores = ((busy - busy0) - (own_cpu_s() - own0)) / wall;
    if (others_cores < 0) others_cores = 0;
  }
}

/* ------------------------------------------------------------- limits */

#define ADJACENT_RUNS 3 /* triad and read runs before and after each row */

/* The machine's bandwidth limits at one moment (GB/s). */
typedef struct limits {
  double triad, read;
} limits;

/* The triad and the read roofline now, best of `reps` runs each; ends the
 * program when either cannot run (out of memory). */
static limits limits_now(const bench_sizes *s, int reps) {
  limits l = {bench_triad(s->triad_n, TRIAD_THREADS, reps), bench_read(s->triad_n, TRIAD_THREADS, reps)};
  if (l.triad <= 0 || l.read <= 0) {
    fprintf(stderr, "kiln_bench: the triad or the read roofline failed (out of memory?)\n");
    exit(1);
  }
  return l;
}

static limits at_start, at_end; /* the machine's limits at the run's start and end */

/* Row r's limit: the better of its kind's figures measured just before it
 * (*before) and just after it (measured here; the next row's before), so
 * a row is compared with the bandwidth the machine had while it ran (this
 * host's swings by up to 1.6x within one run), never with a figure from
 * a faster moment minutes away. NULL r (a skipped row): nothing. */
static void limit_row(row *r, const bench_sizes *s, limits *before) {
  if (!r) return;
  limits after = limits_now(s, ADJACENT_RUNS);
  r->limit_before = r->read_only ? before->read : before->triad;
  r->limit_after = r->read_only ? after.read : after.triad;
  r->limit_gbs = fmax(r->limit_before, r->limit_after);
  r->x_triad = r->rate / r->limit_gbs;
  *before = after;
}

/* -------------------------------------------------------------- G1-G5 */

/* Threads of Kiln's pool as runtime/pool.c picks them: --threads, else
 * KILN_NUM_THREADS (a positive integer), else the online CPUs. The
 * compute roofline and OpenBLAS run on as many. */
static int pool_threads(const options *o) {
  if (o->threads) return o->threads;
  const char *e = getenv("KILN_NUM_THREADS");
  char *end;
  long n = e ? strtol(e, &end, 10) : 0;
  if (e && *e && !*end && n >= 1) return (int)(n > 64 ? 64 : n);
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  return cpus < 1 ? 1 : cpus > 64 ? 64 : (int)cpus;
}

/* What the GEMM rows are compared with, besides Kiln. */
typedef struct gemm_env {
  int threads;         /* pool threads: the roofline's and OpenBLAS's */
  int vector_bits;     /* the JIT target's (kiln_cpu_target) */
  char cpu[64];        /* the JIT target's CPU name */
  const char *variant; /* the roofline loop's (peak.c) */
  double before;       /* the roofline measured last (GFLOP/s) */
  bool quick;
} gemm_env;

/* The compute roofline now, best of a few runs (GFLOP/s); NAN where
 * there is none. */
static double roofline_now(gemm_env *e) {
  double p = bench_fma_peak(e->threads, e->vector_bits, e->quick ? 3 : 5, e->quick ? INT64_C(1) << 20 : INT64_C(1) << 23,
                            &e->variant);
  return p > 0 ? p : NAN;
}

static gemm_env gemm_setup(const options *o) {
  gemm_env e = {.threads = pool_threads(o), .quick = o->quick};
  BKS(kiln_cpu_target(e.cpu, sizeof e.cpu, &e.vector_bits, NULL));
  fprintf(stderr, "kiln_bench: compute roofline (%d threads) ...\n", e.threads);
  e.before = roofline_now(&e);
  return e;
}

/* One GEMM row: OpenBLAS as configured here first, then Kiln (measure),
 * then the roofline after it; the row's limit is the better of the
 * roofline before and after. The child's OpenBLAS comes later
 * (run_blas_child). */
static void measure_gemm(const bench_workload *w, const bench_sizes *s, gemm_env *e, int64_t budget, int max_runs) {
  bench_gemm g = w->gemm(s);
  int blas_runs = 0;
  fprintf(stderr, "kiln_bench: %s (OpenBLAS) ...\n", w->id);
  double blas = bench_blas_gemm(&g, e->threads, budget, max_runs, &blas_runs);
  bench_check(blas > 0, "bench_blas_gemm (out of memory?)", __LINE__);
  row *r = measure(w, s, budget, max_runs);
  r->blas_s = blas;
  snprintf(r->blas_core, sizeof r->blas_core, "%s", bench_blas_core());
  double after = roofline_now(e);
  r->limit_before = e->before;
  r->limit_after = after;
  r->limit_gbs = fmax(e->before, after);
  r->x_triad = r->rate / r->limit_gbs;
  e->before = after;
  size_t len = strlen(r->detail);
  snprintf(r->detail + len, sizeof r->detail - len, "; OpenBLAS %.3f ms (%s, %d runs, %d threads)", blas * 1e3,
           r->blas_core, blas_runs, e->threads);
}

/* OpenBLAS without OPENBLAS_CORETYPE, in a fresh process of this program
 * (--blas-child: OpenBLAS picks its kernel when it is loaded), for every
 * GEMM row measured; fills blas_child_s. A failed child leaves them NAN
 * (the rows' targets then say n/a) with a note. */
static void run_blas_child(const options *o, const gemm_env *e) {
  char self[4096], ids[256] = "", cmd[4800];
  ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  for (int i = 0; i < n_rows; i++) {
    if (!rows[i].compute) continue;
    size_t l = strlen(ids);
    snprintf(ids + l, sizeof ids - l, "%s%.11s", l ? "," : "", rows[i].id);
  }
  if (len <= 0 || !ids[0]) return;
  self[len] = 0;
  fprintf(stderr, "kiln_bench: OpenBLAS without OPENBLAS_CORETYPE (child) ...\n");
  snprintf(cmd, sizeof cmd, "env -u OPENBLAS_CORETYPE '%s' --blas-child --threads %d --only %s%s", self, e->threads,
           ids, o->quick ? " --quick" : "");
  FILE *f = popen(cmd, "r");
  char line[256];
  int got = 0;
  while (f && fgets(line, sizeof line, f)) {
    char id[16], core[24];
    double sec;
    int runs;
    if (sscanf(line, "blas %15s %lf %d %23s", id, &sec, &runs, core) != 4 || !(sec > 0)) continue;
    for (int i = 0; i < n_rows; i++) {
      row *r = &rows[i];
      if (!r->compute || strcmp(r->id, id) != 0) continue;
      r->blas_child_s = sec;
      snprintf(r->blas_child_core, sizeof r->blas_child_core, "%s", core);
      size_t l = strlen(r->detail);
      snprintf(r->detail + l, sizeof r->detail - l, "; OpenBLAS child without OPENBLAS_CORETYPE %.3f ms (%s, %d runs)",
               sec * 1e3, core, runs);
      got++;
    }
  }
  int rc = f ? pclose(f) : -1;
  if ((rc != 0 || got == 0) && n_peer_notes < 4)
    snprintf(peer_notes[n_peer_notes++], sizeof peer_notes[0],
             "the OpenBLAS child (--blas-child) failed (status %d, %d results): no AVX-512 OpenBLAS figures", rc, got);
}

/* G4's epilogue cost: its time over G1's (the same product), in %, as
 * G4's check against its target; G5's likewise, shown without a target;
 * nothing when either did not run. */
static void epilogue_share(void) {
  row *g1 = NULL, *g4 = NULL, *g5 = NULL;
  for (int i = 0; i < n_rows; i++) {
    if (strcmp(rows[i].id, "G1") == 0) g1 = &rows[i];
    if (strcmp(rows[i].id, "G4") == 0) g4 = &rows[i];
    if (strcmp(rows[i].id, "G5") == 0) g5 = &rows[i];
  }
  if (g4) g4->check_max = 3.0;
  if (g4 && g1) g4->check_val = (g4->kiln_s / g1->kiln_s - 1) * 100;
  if (g5 && g1) g5->check_val = (g5->kiln_s / g1->kiln_s - 1) * 100;
}

static void gemm_rows(const options *o, const bench_sizes *s, int64_t budget, int max_runs) {
  bool any = false;
  for (int i = 0; i < bench_n_gemm_workloads; i++)
    any = any || selected(o, bench_gemm_workloads[i].group, bench_gemm_workloads[i].id);
  if (!any) return;
  gemm_env e = gemm_setup(o);
  for (int i = 0; i < bench_n_gemm_workloads; i++) {
    const bench_workload *w = &bench_gemm_workloads[i];
    if (selected(o, w->group, w->id)) measure_gemm(w, s, &e, budget, max_runs);
  }
  run_blas_child(o, &e);
  epilogue_share();
  snprintf(gemm_note, sizeof gemm_note,
           "JIT target %s (%d-bit vectors): roofline loop %s on %d threads; OpenBLAS on %d threads", e.cpu,
           e.vector_bits, e.variant ? e.variant : "-", e.threads, e.threads);
}

/* -------------------------------------------------------------- table */

static void fmt(char *buf, size_t n, const char *f, double v) {
  if (isnan(v)) snprintf(buf, n, "-");
  else snprintf(buf, n, f, v);
}

/* The GEMM rows again, with their own comparisons (GFLOP/s): OpenBLAS
 * as configured here and in the child, the better of the two, the
 * compute roofline, G4's and G5's epilogues. Nothing when no GEMM row ran. */
static void print_gemm_table(void) {
  bool any = false;
  for (int i = 0; i < n_rows; i++) any = any || rows[i].compute;
  if (!any) return;
  printf("\nGEMM rows (GFLOP/s = 2*M*N*K / time): %s\n\n", gemm_note);
  printf("| %-4s | %8s | %-24s | %-24s | %8s | %8s | %10s | %8s | %-38s | %-4s |\n", "id", "Kiln", "OpenBLAS here",
         "OpenBLAS child", "x best", "roofline", "x roofline", "epilogue", "target", "met?");
  printf("|------|---------:|--------------------------|--------------------------|---------:|---------:|-----------:|"
         "---------:|----------------------------------------|------|\n");
  for (int i = 0; i < n_rows; i++) {
    const row *r = &rows[i];
    if (!r->compute) continue;
    char kiln[16], here[40], child[40], xb[16], roof[16], xr[16], epi[16];
    double x;
    best_blas(r, &x);
    fmt(kiln, sizeof kiln, "%.1f", r->rate);
    if (isnan(r->blas_s)) snprintf(here, sizeof here, "-");
    else snprintf(here, sizeof here, "%.1f (%.14s)", r->gflop / r->blas_s, r->blas_core);
    if (isnan(r->blas_child_s)) snprintf(child, sizeof child, "-");
    else snprintf(child, sizeof child, "%.1f (%.14s)", r->gflop / r->blas_child_s, r->blas_child_core);
    fmt(xb, sizeof xb, "%.3f", x);
    fmt(roof, sizeof roof, "%.1f", r->limit_gbs);
    fmt(xr, sizeof xr, "%.3f", r->x_triad);
    fmt(epi, sizeof epi, "%+.1f%%", r->check_val); /* G4, G5 (epilogue_share) */
    printf("| %-4s | %8s | %-24s | %-24s | %8s | %8s | %10s | %8s | %-38s | %-4s |\n", r->id, kiln, here, child, xb,
           roof, xr, epi, r->target, met(r));
  }
  printf("\n  OpenBLAS here: cblas_sgemm in this process as configured (OPENBLAS_CORETYPE=%s); child: in a fresh "
         "process without OPENBLAS_CORETYPE (OpenBLAS's own kernel choice); x best = best OpenBLAS time / Kiln time; "
         "x roofline = Kiln GFLOP/s / the roofline (the better of before and after the row); epilogue = "
         "time(G4 or G5) / time(G1) - 1; OpenBLAS's G4 and G5 figures are the bare product\n",
         getenv("OPENBLAS_CORETYPE") ? getenv("OPENBLAS_CORETYPE") : "unset");
}

static void print_table(const options *o, const bench_sizes *s, double triad_gbs, double read_gbs) {
  char thr[48] = "engine default";
  if (o->threads) snprintf(thr, sizeof thr, "%d (--threads)", o->threads);
  printf("\nkiln_bench%s: n=%lld, sq=%lldx%lld, ln=%lldx%lld, tiny=%lld x %d ops; kiln threads: %s; "
         "triad %.2f GB/s, read %.2f GB/s (%d threads, 3 x %lld MiB F32 arrays; best of runs at start %.2f / %.2f "
         "and end %.2f / %.2f; each row's x limit uses its own, measured just before and after it: see details)\n\n",
         o->quick ? " --quick" : "", (long long)s->n, (long long)s->sq, (long long)s->sq, (long long)s->ln_rows,
         (long long)s->ln_cols, (long long)s->tiny, s->chain, thr, triad_gbs, read_gbs, TRIAD_THREADS,
         (long long)(s->triad_n * 4 >> 20), at_start.triad, at_start.read, at_end.triad, at_end.read);
  printf("| %-8s | %9s | %8s | %7s | %7s | %7s | %7s | %-5s | %6s | %-42s | %-4s |\n", "id", "Kiln ms", "GB/s*",
         "kernels", "x limit", "x NumPy", "x Torch", "best", "x best", "target", "met?");
  printf("|----------|----------:|---------:|--------:|--------:|--------:|--------:|-------|-------:|"
         "--------------------------------------------|------|\n");
  for (int i = 0; i < n_rows; i++) {
    const row *r = &rows[i];
    char ms[16], rate[16], k[16], xt[16], xn[16], xo[16], xb[16];
    double best_x;
    const char *best = best_peer(r, &best_x);
    fmt(ms, sizeof ms, r->ms < 0.1 ? "%.4f" : "%.2f", r->ms);
    fmt(rate, sizeof rate, "%.2f", r->rate);
    if (r->kernels >= 0) snprintf(k, sizeof k, "%d", r->kernels);
    else snprintf(k, sizeof k, "-");
    fmt(xt, sizeof xt, "%.3f", r->x_triad);
    fmt(xn, sizeof xn, "%.3f", r->numpy_s / r->kiln_s);
    fmt(xo, sizeof xo, "%.3f", r->torch_s / r->kiln_s);
    fmt(xb, sizeof xb, "%.3f", best_x);
    printf("| %-8s | %9s | %8s | %7s | %7s | %7s | %7s | %-5s | %6s | %-42s | %-4s |\n", r->id, ms, rate, k, xt, xn,
           xo, best ? best : "-", xb, r->target, met(r));
  }
  printf("\n* GB/s = ideal bytes (one read of each input, one write of the output) / Kiln time; "
         "W8rec: us to record one op; W8run: us a force adds per kernel beyond the kernels' run time; C1: ms compiling (profiler compile_ns); "
         "G*: GFLOP/s, and x limit against the compute roofline (table below)\n");
  printf("  check = worst sampled output error vs a double host reference, in tolerance units (<= 1 right)\n");
  printf("  x limit = Kiln GB/s / the limit's GB/s: the read roofline for the reductions (W3), the triad otherwise, "
         "the better of the figures measured just before and just after the row (best of %d runs each); "
         "x NumPy, x Torch, x best = peer time / Kiln time (> 1: Kiln faster), best = the faster peer; "
         "Torch: torch.set_num_threads(2), native softmax/layer_norm\n",
         ADJACENT_RUNS);
  for (int i = 0; i < n_peer_notes; i++) printf("  note: %s\n", peer_notes[i]);
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  if (others_cores >= 0) {
    printf("  other processes used %.2f of the machine's %ld cores on average during this run", others_cores, cores);
    if (others_cores > 0.2)
      printf(": the machine was SHARED; 2-thread figures (triad, Torch, Kiln's pool) are then too low");
    printf("\n");
  }
  print_gemm_table();
  printf("\ndetails:\n");
  for (int i = 0; i < n_rows; i++) {
    const row *r = &rows[i];
    printf("  %-8s %s", r->id, r->detail);
    if (!isnan(r->limit_gbs))
      printf("; limit (%s) %.2f %s: before %.2f, after %.2f", r->compute ? "roofline" : r->read_only ? "read" : "triad",
             r->limit_gbs, r->compute ? "GFLOP/s" : "GB/s", r->limit_before, r->limit_after);
    if (!isnan(r->numpy_s)) printf("; NumPy %.3f ms", r->numpy_s * 1e3);
    if (!isnan(r->torch_s)) printf("; Torch %.3f ms", r->torch_s * 1e3);
    printf("\n");
  }
}

/* ---------------------------------------------------------------- json */

/* A JSON number, or null for NaN / infinity. */
static void json_num(FILE *f, const char *key, double v, bool last) {
  if (isfinite(v)) fprintf(f, "\"%s\": %.9g%s", key, v, last ? "" : ", ");
  else fprintf(f, "\"%s\": null%s", key, last ? "" : ", ");
}

/* A JSON string of plain text (ids, targets, names: no control characters;
 * quotes and backslashes are escaped). */
static void json_str(FILE *f, const char *key, const char *v, bool last) {
  fprintf(f, "\"%s\": ", key);
  if (!v) {
    fprintf(f, "null%s", last ? "" : ", ");
    return;
  }
  fputc('"', f);
  for (const char *p = v; *p; p++) {
    if (*p == '"' || *p == '\\') fputc('\\', f);
    if ((unsigned char)*p >= 0x20) fputc(*p, f);
  }
  fprintf(f, "\"%s", last ? "" : ", ");
}

/* Every figure of the table, for bench/compare.py. Returns false when the
 * file cannot be written. */
static bool write_json(const char *path, const options *o, double triad_gbs, double read_gbs) {
  FILE *f = fopen(path, "w");
  if (!f) return false;
  fprintf(f, "{");
  fprintf(f, "\"unix_time\": %lld, ", (long long)time(NULL));
  fprintf(f, "\"quick\": %s, \"threads\": %d, ", o->quick ? "true" : "false", o->threads);
  json_num(f, "triad_gbs", triad_gbs, false);
  json_num(f, "read_gbs", read_gbs, false);
  json_num(f, "other_cores", others_cores, false);
  fprintf(f, "\"rows\": [\n");
  for (int i = 0; i < n_rows; i++) {
    const row *r = &rows[i];
    double best_x;
    const char *best = best_peer(r, &best_x);
    fprintf(f, "  {");
    json_str(f, "id", r->id, false);
    json_num(f, "kiln_ms", r->ms, false);
    json_num(f, "rate", r->rate, false);
    json_num(f, "kernels", r->kernels >= 0 ? r->kernels : NAN, false);
    json_num(f, "x_limit", r->x_triad, false);
    json_str(f, "limit", r->compute ? "roofline" : r->read_only ? "read" : "triad", false);
    json_num(f, "limit_gbs", r->limit_gbs, false);
    json_num(f, "numpy_ms", r->numpy_s * 1e3, false);
    json_num(f, "torch_ms", r->torch_s * 1e3, false);
    json_str(f, "best_peer", best, false);
    json_num(f, "x_best", best_x, false);
    json_str(f, "target", r->target, false);
    if (r->compute) { /* GEMM rows: rate and limit_gbs are GFLOP/s */
      double x;
      best_blas(r, &x);
      json_num(f, "gflop", r->gflop, false);
      json_num(f, "blas_ms", r->blas_s * 1e3, false);
      json_str(f, "blas_core", r->blas_core, false);
      json_num(f, "blas_child_ms", r->blas_child_s * 1e3, false);
      json_str(f, "blas_child_core", r->blas_child_core, false);
      json_num(f, "x_blas", x, false);
      json_num(f, "epilogue_pct", r->check_val, false); /* G4, G5; NAN (null) for the others */
    }
    json_str(f, "kind", r->compute ? "compute" : "memory", false);
    json_str(f, "met", met(r), true);
    fprintf(f, "}%s\n", i + 1 < n_rows ? "," : "");
  }
  fprintf(f, "]}\n");
  return fclose(f) == 0;
}

/* --------------------------------------------------------------- main */

int main(int argc, char **argv) {
  options o = parse(argc, argv);
  /* the warm-up runs compile, as the method says: no on-disk kernel cache
   * unless KILN_CACHE_DIR is set (C1 sets its own for its children) */
  if (!o.c1_child) setenv("KILN_CACHE_DIR", "", 0);
  bench_sizes s = sizes_for(o.quick);
  kiln_manual_seed(1234);
  if (o.threads) BKS(kiln_set_num_threads(o.threads));
  int64_t budget = o.quick ? 200000000 : 2000000000; /* ns per workload */
  int max_runs = o.quick ? 10 : 15;
  if (o.c1_child) {
    c1_child(&s);
    return 0;
  }
  if (o.blas_child) {
    bench_blas_child(&s, o.only, o.threads ? o.threads : 1, budget, max_runs);
    return 0;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);

  load_mark_start();
  fprintf(stderr, "kiln_bench: triad ...\n");
  int triad_runs = o.quick ? 5 : 10;
  at_start = limits_now(&s, triad_runs);

  limits before = at_start;
  for (int i = 0; i < bench_n_workloads; i++) {
    const bench_workload *w = &bench_workloads[i];
    if (!selected(&o, w->group, w->id)) continue;
    limit_row(measure(w, &s, budget, max_runs), &s, &before);
  }
  int hand_threads = o.threads ? o.threads : TRIAD_THREADS;
  if (selected(&o, "W7", "W7-hand")) limit_row(measure_hand("W7-hand", s.sq, hand_threads, max_runs), &s, &before);
  if (selected(&o, "W7", "W7r-hand"))
    limit_row(measure_hand("W7r-hand", s.sq - 1, hand_threads, max_runs), &s, &before);
  gemm_rows(&o, &s, budget, max_runs);
  if (selected(&o, "W8", "W8")) measure_w8(&s, o.quick ? 100000000 : 1000000000);
  if (selected(&o, "C1", "C1")) measure_c1(&o);
  if (n_rows == 0) {
    fprintf(stderr, "kiln_bench: --only %s selects no workload\n", o.only);
    return 2;
  }
  /* the machine's limits again, for the header (the rows have their own) */
  fprintf(stderr, "kiln_bench: triad again ...\n");
  at_end = limits_now(&s, triad_runs);
  bench_triad_free();
  double triad = fmax(at_start.triad, at_end.triad), read = fmax(at_start.read, at_end.read);
  if (!o.no_peers) run_peers(&o, &s);
  else snprintf(peer_notes[n_peer_notes++], sizeof peer_notes[0], "--no-peers: NumPy/PyTorch not run");
  load_mark_end();
  print_table(&o, &s, triad, read);
  if (o.json && !write_json(o.json, &o, triad, read)) {
    fprintf(stderr, "kiln_bench: cannot write %s: %s\n", o.json, strerror(errno));
    return 1;
  }
  for (int i = 0; i < n_rows; i++)
    if (!(rows[i].wrong <= 1)) {
      fprintf(stderr, "kiln_bench: %s computed a WRONG result (error %.3g x tolerance)\n", rows[i].id,
              rows[i].wrong);
      return 1;
    }
  return 0;
}
