/*
 * test_alloc_faults.c — the allocation-failure walk (graph/fault.h): each
 * representative program runs once counting its allocations (host, buffer
 * and JIT), then once per allocation N with the N-th failing. Every run
 * must end without a crash; the call that failed returns KILN_ERR_OOM (a
 * failed JIT link: KILN_ERR_COMPILE naming the kernel) with a message;
 * after the failure every tensor made so far forces and holds the values
 * of the calls that succeeded (a write that failed left its target
 * unchanged, a failed force left its tensors pending and forceable);
 * every handle is released with no pending node left over (and no leak:
 * LeakSanitizer in the ASan build); and the program then runs again
 * without a fault, with the right values.
 *
 * The caches start cold for each faulted run (schedules and kernels
 * forgotten), so every run makes the allocations of a first force,
 * compiles included. One kernel thread: with several, which allocation
 * is the N-th depends on their interleaving (one walk runs on two threads
 * to cover the parallel compile path anyway).
 *
 * KILN_TEST_FAULT_STRIDE=k walks every k-th allocation (default 1; under
 * AddressSanitizer, cold walks default to about 50 runs per program);
 * KILN_TEST_FAULT_PROGRAM=views/2 (or views/1/warm, or a program's name)
 * walks one program; KILN_TEST_FAULT_ONLY=n runs only the n-th fault.
 * docs/testing.md, "Allocation-failure walk".
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "graph.h"
#include "kiln/kiln.h"
#include "rt_internal.h"

#define V(...) ((int64_t[]){__VA_ARGS__})
#define MAXV 64

/* What one run of a program saw. */
typedef struct run_state {
  bool failed;         /* a call failed */
  int ret, line;       /* what it returned (a status call), and the test line */
  int status;          /* the thread's first error then */
  char msg[512];       /* the thread's error message then */
  int fired;           /* the fault's site, -1 if none fired */
  int64_t counted[GRAPH_FAULT_SITE_COUNT]; /* allocations counted, per site */
} run_state;

static int64_t fault_at; /* the run's armed allocation, for messages */

static void note_failure(run_state *rs, int ret, int line) {
  rs->failed = true;
  rs->ret = ret;
  rs->status = kiln_last_status();
  rs->line = line;
  snprintf(rs->msg, sizeof rs->msg, "%s", kiln_last_error());
}

/* A call returning a tensor (NULL on failure) or a status. */
#define TRY(rs, expr)                     \
  do {                                    \
    if (!(expr)) {                        \
      note_failure(rs, KILN_OK, __LINE__); \
      goto done;                          \
    }                                     \
  } while (0)
#define TRY_OK(rs, call)               \
  do {                                 \
    int st_ = (call);                  \
    if (st_ != KILN_OK) {              \
      note_failure(rs, st_, __LINE__); \
      goto done;                       \
    }                                  \
  } while (0)

/* A failure, named after the run's fault. */
#define FAIL(fmt, ...) fail_msg("[fault %lld] " fmt, (long long)fault_at, __VA_ARGS__)

static const char *name(int status) { return kiln_status_name((kiln_status)status); }

/* The run is over: the fault is disarmed, and what failed must be the
 * fault's doing, reported as such. */
static void settle(run_state *rs, const char *prog) {
  rs->fired = graph_fault_fired();
  for (int i = 0; i < GRAPH_FAULT_SITE_COUNT; i++) rs->counted[i] = graph_fault_site_count((graph_fault_site)i);
  graph_fault_arm(-1);
  if (!rs->failed) {
    if (kiln_last_status() != KILN_OK) FAIL("%s: every call succeeded, yet the error is %s", prog, kiln_last_error());
    return;
  }
  if (rs->fired < 0) FAIL("%s: line %d failed without a fault (%s): %s", prog, rs->line, name(rs->status), rs->msg);
  int want = rs->fired == GRAPH_FAULT_JIT ? KILN_ERR_COMPILE : KILN_ERR_OOM;
  if (rs->status != want)
    FAIL("%s: line %d: the error is %s after a fault at site %d (want %s): %s", prog, rs->line, name(rs->status),
         rs->fired, name(want), rs->msg);
  /* a call given the NULL of a call that failed before returns
   * KILN_ERR_ARG, its own outcome; the thread's error is the first's */
  if (rs->ret != KILN_OK && rs->ret != want && rs->ret != KILN_ERR_ARG)
    FAIL("%s: line %d returned %s after a fault at site %d: %s", prog, rs->line, name(rs->ret), rs->fired, rs->msg);
  const char *need = want == KILN_ERR_OOM ? "out of memory" : "llvm_compile: ";
  if (!strstr(rs->msg, need)) FAIL("%s: line %d: message \"%s\" lacks \"%s\"", prog, rs->line, rs->msg, need);
  kiln_clear_error();
}

/* t (NULL: never made) forces and holds want [n] (row-major, as F64). */
static void check_values(const char *prog, const char *what, kiln_tensor *t, const double *want, int64_t n,
                         double tol) {
  if (!t) return;
  assert_int_equal(kiln_numel(t), n);
  double got[MAXV];
  assert_true(n <= MAXV);
  kiln_tensor *c = kiln_to_dtype(t, KILN_F64);
  int st = kiln_read(c, got, sizeof got);
  kiln_release(c);
  if (st != KILN_OK) FAIL("%s: %s: forcing after the fault failed: %s", prog, what, kiln_last_error());
  for (int64_t i = 0; i < n; i++)
    if (!(fabs(got[i] - want[i]) <= tol * (1 + fabs(want[i]))))
      FAIL("%s: %s[%lld] = %.9g, want %.9g", prog, what, (long long)i, got[i], want[i]);
}

/* ------------------------------------------------------------ programs */

/* Views, in-place writes through views (narrow, a transposed select), a
 * fused chain with a row reduction, a force; then writes into the
 * realized storage while a pending reader still needs the old contents
 * (copy-on-write), and a second force. */
static void prog_views(run_state *rs) {
  const char *P = "views";
  double x[12], y[12], z[12], r[12], xs_at_z[12];
  for (int i = 0; i < 12; i++) x[i] = i, y[i] = 2 * i + 1;
  kiln_scope_begin();
  kiln_tensor *xs = NULL, *yt = NULL, *zt = NULL, *rt = NULL, *v;
  TRY(rs, xs = kiln_reshape(kiln_arange(KILN_F32, 0, 12, 1), 2, V(3, 4)));
  TRY(rs, yt = kiln_add_scalar(kiln_mul_scalar(xs, 2), 1));
  TRY(rs, v = kiln_narrow(xs, 1, 1, 2));
  TRY_OK(rs, kiln_fill_(v, -1));
  for (int i = 0; i < 3; i++) x[i * 4 + 1] = x[i * 4 + 2] = -1;
  TRY(rs, v = kiln_select(kiln_transpose(xs, 0, 1), 0, 3));
  TRY_OK(rs, kiln_copy_(v, kiln_add_scalar(kiln_arange(KILN_F32, 0, 3, 1), 100)));
  for (int i = 0; i < 3; i++) x[i * 4 + 3] = 100 + i;
  TRY(rs, zt = kiln_add(kiln_mul_scalar(kiln_exp(kiln_mul_scalar(xs, 0.01)), 0.5),
                        kiln_sum(xs, 1, (int[]){1}, true)));
  memcpy(xs_at_z, x, sizeof x);
  TRY_OK(rs, kiln_realize(zt));
  TRY(rs, rt = kiln_mul_scalar(xs, 3)); /* pending reader of the realized contents */
  memcpy(r, x, sizeof x);
  for (int i = 0; i < 12; i++) r[i] *= 3;
  TRY_OK(rs, kiln_fill_(kiln_select(xs, 0, 0), 7));
  for (int i = 0; i < 4; i++) x[i] = 7;
  TRY_OK(rs, kiln_realize(xs));
done:
  settle(rs, P);
  for (int i = 0; i < 12; i++) {
    double s = 0;
    for (int j = 0; j < 4; j++) s += xs_at_z[i / 4 * 4 + j];
    z[i] = exp(xs_at_z[i] * 0.01) * 0.5 + s;
  }
  check_values(P, "x", xs, x, 12, 0);
  check_values(P, "y", yt, y, 12, 0);
  check_values(P, "z", zt, z, 12, 1e-6);
  check_values(P, "r", rt, r, 12, 0);
  kiln_scope_end();
}

/* relu(a @ b^T + bias) * 2 (BLAS with a transposed operand, epilogue
 * fused) and a matrix-vector product of its result. */
static void prog_matmul(run_state *rs) {
  const char *P = "matmul";
  double a[12], b[15], bias[5], c[20], d[4];
  for (int i = 0; i < 12; i++) a[i] = (i % 5) - 2;
  for (int i = 0; i < 15; i++) b[i] = (i % 3) + 0.5 * (i % 2);
  for (int j = 0; j < 5; j++) bias[j] = j - 2.5;
  for (int i = 0; i < 4; i++) {
    d[i] = 0;
    for (int j = 0; j < 5; j++) {
      double s = bias[j];
      for (int k = 0; k < 3; k++) s += a[i * 3 + k] * b[j * 3 + k];
      c[i * 5 + j] = (s > 0 ? s : 0) * 2;
      d[i] += c[i * 5 + j] * (j + 1);
    }
  }
  kiln_scope_begin();
  kiln_tensor *at, *bt, *biast, *ct = NULL, *dt = NULL, *w;
  TRY(rs, at = kiln_from_data(KILN_F64, 2, V(4, 3), a));
  TRY(rs, bt = kiln_from_data(KILN_F64, 2, V(5, 3), b));
  TRY(rs, biast = kiln_from_data(KILN_F64, 1, V(5), bias));
  TRY(rs, ct = kiln_mul_scalar(kiln_relu(kiln_add(kiln_matmul(at, kiln_t(bt)), biast)), 2));
  TRY(rs, w = kiln_arange(KILN_F64, 1, 6, 1));
  TRY(rs, dt = kiln_mv(ct, w));
  TRY_OK(rs, kiln_realize(dt));
done:
  settle(rs, P);
  check_values(P, "c", ct, c, 20, 1e-12);
  check_values(P, "d", dt, d, 4, 1e-12);
  kiln_scope_end();
}

/* index_select, gather, index_add_ (the extern loop), index_fill_,
 * masked_fill_, masked_select, nonzero and cat over one storage that the
 * writes keep changing. */
static void prog_index(run_state *rs) {
  const char *P = "index";
  double base[15], sel[9], gat[5], ms[15], cat[18];
  int64_t nms = 0, nz_rows = 0;
  double nz[30];
  bool have_ms = false, have_nz = false;
  const int64_t idx[3] = {4, 0, 2}, gidx[5] = {2, 1, 0, 1, 2};
  for (int i = 0; i < 15; i++) base[i] = i;
  kiln_scope_begin();
  kiln_tensor *bt = NULL, *it, *st = NULL, *gt = NULL, *mst = NULL, *nzt = NULL, *ct = NULL, *m;
  TRY(rs, bt = kiln_reshape(kiln_arange(KILN_F32, 0, 15, 1), 2, V(5, 3)));
  TRY(rs, it = kiln_from_data(KILN_I64, 1, V(3), idx));
  TRY(rs, st = kiln_index_select(bt, 0, it));
  for (int i = 0; i < 9; i++) sel[i] = base[idx[i / 3] * 3 + i % 3];
  TRY(rs, gt = kiln_gather(bt, 1, kiln_from_data(KILN_I64, 2, V(5, 1), gidx)));
  for (int i = 0; i < 5; i++) gat[i] = base[i * 3 + gidx[i]];
  TRY_OK(rs, kiln_index_add_(bt, 0, it, kiln_ones(KILN_F32, 2, V(3, 3))));
  for (int i = 0; i < 9; i++) base[idx[i / 3] * 3 + i % 3] += 1;
  TRY_OK(rs, kiln_index_fill_(bt, 1, kiln_from_data(KILN_I64, 1, V(1), (int64_t[]){1}), -5));
  for (int i = 0; i < 5; i++) base[i * 3 + 1] = -5;
  TRY(rs, m = kiln_gt_scalar(bt, 10));
  TRY_OK(rs, kiln_masked_fill_(bt, m, 0));
  for (int i = 0; i < 15; i++) base[i] = base[i] > 10 ? 0 : base[i];
  TRY(rs, mst = kiln_masked_select(bt, kiln_gt_scalar(bt, 5)));
  for (int i = 0; i < 15; i++)
    if (base[i] > 5) ms[nms++] = base[i];
  have_ms = true;
  TRY(rs, nzt = kiln_nonzero(kiln_lt_scalar(bt, 0)));
  for (int i = 0; i < 15; i++)
    if (base[i] < 0) nz[2 * nz_rows] = i / 3, nz[2 * nz_rows + 1] = i % 3, nz_rows++;
  have_nz = true;
  TRY(rs, ct = kiln_cat((kiln_tensor *[]){st, st}, 2, 0));
  for (int i = 0; i < 18; i++) cat[i] = sel[i % 9];
  TRY_OK(rs, kiln_realize(ct));
done:
  settle(rs, P);
  check_values(P, "base", bt, base, 15, 0);
  check_values(P, "index_select", st, sel, 9, 0);
  check_values(P, "gather", gt, gat, 5, 0);
  if (have_ms) check_values(P, "masked_select", mst, ms, nms, 0);
  if (have_nz) check_values(P, "nonzero", nzt, nz, 2 * nz_rows, 0);
  check_values(P, "cat", ct, cat, 18, 0);
  kiln_scope_end();
}

/* The sorting ops: sort and topk (ARGSORT loops, values gathered), a
 * median over a NaN row (a where over a NaN count), mode (the MODE loop)
 * and unique (forces, host runs). */
static void prog_sort(run_state *rs) {
  const char *P = "sort";
  const float x[8] = {3, 7, 1, 3, 2, 0, 2, 5}, nan_row[4] = {3, NAN, 1, 3};
  kiln_scope_begin();
  kiln_tensor *xt, *nt, *sv = NULL, *si = NULL, *tv = NULL, *ti = NULL, *mv = NULL, *mi = NULL;
  kiln_tensor *dv = NULL, *di = NULL, *uv = NULL, *uc = NULL;
  TRY(rs, xt = kiln_from_data(KILN_F32, 2, V(2, 4), x));
  TRY(rs, nt = kiln_from_data(KILN_F32, 1, V(4), nan_row));
  TRY_OK(rs, kiln_sort(xt, 1, true, true, &sv, &si));
  TRY_OK(rs, kiln_topk(xt, 2, 1, false, true, &tv, &ti));
  TRY_OK(rs, kiln_median(nt, 0, false, &mv, &mi));
  TRY_OK(rs, kiln_mode(xt, 1, false, &dv, &di));
  TRY_OK(rs, kiln_unique(xt, true, false, true, &uv, NULL, &uc));
  TRY_OK(rs, kiln_realize(sv));
done:
  settle(rs, P);
  check_values(P, "sort values", sv, (double[]){7, 3, 3, 1, 5, 2, 2, 0}, 8, 0);
  check_values(P, "sort indices", si, (double[]){1, 0, 3, 2, 3, 0, 2, 1}, 8, 0);
  check_values(P, "topk values", tv, (double[]){1, 3, 0, 2}, 4, 0);
  check_values(P, "median index", mi, (double[]){1}, 1, 0);
  check_values(P, "mode values", dv, (double[]){3, 2}, 2, 0);
  check_values(P, "mode indices", di, (double[]){3, 2}, 2, 0);
  check_values(P, "unique values", uv, (double[]){0, 1, 2, 3, 5, 7}, 6, 0);
  check_values(P, "unique counts", uc, (double[]){1, 1, 2, 2, 1, 1}, 6, 0);
  kiln_scope_end();
}

/* The accumulating scatters (ops/scatter.c): scatter_add_ and index_put_
 * (accumulate, and last write through a transposed target, which goes
 * through a copy written back), bincount with weights, histc. */
static void prog_scatter(run_state *rs) {
  const char *P = "scatter";
  double base[6] = {0, 1, 2, 3, 4, 5}, cnt[4] = {0, 2.5, 0, 4}, hist[3] = {2, 0, 1};
  kiln_scope_begin();
  kiln_tensor *bt = NULL, *ct = NULL, *ht = NULL, *i2, *two[2], *w;
  TRY(rs, bt = kiln_reshape(kiln_arange(KILN_F32, 0, 6, 1), 2, V(2, 3))); /* [[0,1,2],[3,4,5]] */
  TRY(rs, i2 = kiln_from_data(KILN_I64, 2, V(1, 3), (int64_t[]){1, 0, 1}));
  TRY_OK(rs, kiln_scatter_add_(bt, 0, i2, kiln_ones(KILN_F32, 2, V(1, 3))));
  base[3] += 1, base[1] += 1, base[5] += 1;
  TRY(rs, two[0] = kiln_from_data(KILN_I64, 1, V(2), (int64_t[]){-1, 0}));
  TRY(rs, two[1] = kiln_from_data(KILN_I64, 1, V(2), (int64_t[]){2, 2}));
  TRY_OK(rs, kiln_index_put_(bt, 2, two, kiln_full(KILN_F32, 1, V(2), 10), true));
  base[5] += 10, base[2] += 10;
  TRY(rs, two[0] = kiln_from_data(KILN_I64, 1, V(2), (int64_t[]){2, 2}));
  TRY(rs, two[1] = kiln_from_data(KILN_I64, 1, V(2), (int64_t[]){1, 0}));
  TRY_OK(rs, kiln_index_put_(kiln_t(bt), 2, two, kiln_from_data(KILN_F32, 1, V(2), (float[]){-7, -8}), false));
  base[5] = -7, base[2] = -8; /* t(bt)[2][1] = bt[1][2], t(bt)[2][0] = bt[0][2] */
  TRY(rs, w = kiln_from_data(KILN_F32, 1, V(3), (float[]){1.5f, 1, 4}));
  TRY(rs, ct = kiln_bincount(kiln_from_data(KILN_I64, 1, V(3), (int64_t[]){1, 1, 3}), w, 0));
  TRY(rs, ht = kiln_histc(kiln_from_data(KILN_F32, 1, V(3), (float[]){1, 2, 5}), 3, 0, 0));
  TRY_OK(rs, kiln_realize(ht));
done:
  settle(rs, P);
  check_values(P, "base", bt, base, 6, 0);
  check_values(P, "bincount", ct, cnt, 4, 0);
  check_values(P, "histc", ht, hist, 3, 0);
  kiln_scope_end();
}

static char tmp_dir[64];

static const char *tmp_path(const char *name) {
  static char buf[4][128];
  static int k;
  char *p = buf[k++ % 4];
  snprintf(p, 128, "%s/%s", tmp_dir, name);
  return p;
}

static bool exists(const char *path) {
  struct stat s;
  return stat(path, &s) == 0;
}

/* A failed save leaves no file behind. */
static void check_no_partial(const char *prog, bool saved, const char *path) {
  if (!saved && exists(path)) FAIL("%s: a failed save left %s", prog, path);
}

/* .npy and safetensors: a transposed view saved and loaded back; a
 * safetensors file of two tensors read whole and by name. */
static void prog_io(run_state *rs) {
  const char *P = "io";
  const char *npy = tmp_path("t.npy"), *st = tmp_path("t.safetensors");
  remove(npy);
  remove(st);
  double tv[6] = {0, 3, 1, 4, 2, 5}, iv[4] = {7, -1, 7, 2};
  bool npy_saved = false, st_saved = false;
  int n = 0;
  char **names = NULL;
  kiln_tensor **ts = NULL;
  char *text = NULL;
  kiln_scope_begin();
  kiln_tensor *t, *i64, *ln = NULL, *lb = NULL;
  TRY(rs, t = kiln_transpose(kiln_reshape(kiln_arange(KILN_F32, 0, 6, 1), 2, V(2, 3)), 0, 1));
  TRY(rs, i64 = kiln_from_data(KILN_I64, 1, V(4), (int64_t[]){7, -1, 7, 2}));
  TRY_OK(rs, kiln_save_npy(t, npy));
  npy_saved = true;
  TRY(rs, ln = kiln_load_npy(npy));
  TRY_OK(rs, kiln_save_safetensors(st, 2, (const char *[]){"a", "b"}, (kiln_tensor *[]){t, i64}));
  st_saved = true;
  TRY_OK(rs, kiln_load_safetensors(st, &n, &names, &ts));
  TRY(rs, lb = kiln_load_safetensor(st, "b"));
  TRY(rs, text = kiln_to_string(t));
  if (!strstr(text, "[kiln.FloatTensor of size 3x2]")) fail_msg("io: kiln_to_string gave %s", text);
done:
  free(text);
  settle(rs, P);
  check_no_partial(P, npy_saved, npy);
  check_no_partial(P, st_saved, st);
  check_values(P, "npy", ln, tv, 6, 0);
  check_values(P, "safetensor b", lb, iv, 4, 0);
  if (ts) {
    assert_int_equal(n, 2);
    assert_string_equal(names[0], "a");
    check_values(P, "safetensors a", ts[0], tv, 6, 0);
    check_values(P, "safetensors b", ts[1], iv, 4, 0);
  }
  kiln_safetensors_free(n, names, ts);
  kiln_scope_end();
}

/* Profiling on: a softmax (one row kernel) and an elementwise chain
 * forced together, the records read, printed and written as a trace; the
 * DOT graph of pending work before and after the passes. */
static void prog_profile(run_state *rs) {
  const char *P = "profile";
  double sm[8], e[8];
  for (int r = 0; r < 2; r++) {
    double s = 0;
    for (int j = 0; j < 4; j++) s += exp(r * 4 + j - (r * 4 + 3));
    for (int j = 0; j < 4; j++) sm[r * 4 + j] = exp(r * 4 + j - (r * 4 + 3)) / s;
  }
  for (int i = 0; i < 8; i++) e[i] = (i + 1) * (i + 1) - i;
  FILE *f = fopen("/dev/null", "w");
  assert_non_null(f);
  kiln_scope_begin();
  kiln_profile_begin();
  kiln_tensor *x, *smt = NULL, *et = NULL;
  kiln_kernel_record rec;
  TRY(rs, x = kiln_reshape(kiln_arange(KILN_F32, 0, 8, 1), 2, V(2, 4)));
  TRY(rs, smt = kiln_softmax(x, 1));
  TRY(rs, et = kiln_sub(kiln_mul(kiln_add_scalar(x, 1), kiln_add_scalar(x, 1)), x));
  TRY_OK(rs, kiln_graph_write_dot((kiln_tensor *[]){smt, et}, 2, tmp_path("before.dot"), KILN_DOT_BEFORE_PASSES));
  TRY_OK(rs, kiln_graph_write_dot((kiln_tensor *[]){smt, et}, 2, tmp_path("after.dot"), KILN_DOT_AFTER_PASSES));
  TRY_OK(rs, kiln_realize_many((kiln_tensor *[]){smt, et}, 2));
  kiln_profile_end();
  assert_true(kiln_profile_count() >= 1);
  TRY_OK(rs, kiln_profile_get(0, &rec));
  TRY_OK(rs, kiln_profile_print(f));
  TRY_OK(rs, kiln_profile_write_trace(tmp_path("trace.json")));
done:
  kiln_profile_end();
  settle(rs, P);
  check_values(P, "softmax", smt, sm, 8, 1e-6);
  check_values(P, "chain", et, e, 8, 0);
  kiln_scope_end();
  fclose(f);
}

/* kiln_grad of y = sum(tanh(x * w) + x * x) with respect to x and w. */
static void prog_grad(run_state *rs) {
  const char *P = "grad";
  const double x[3] = {0.5, -1, 2}, w[3] = {1.5, 0.25, -0.5};
  double y = 0, dx[3], dw[3];
  for (int i = 0; i < 3; i++) {
    double th = tanh(x[i] * w[i]);
    y += th + x[i] * x[i];
    dx[i] = (1 - th * th) * w[i] + 2 * x[i];
    dw[i] = (1 - th * th) * x[i];
  }
  kiln_scope_begin();
  kiln_tensor *xt, *wt, *yt = NULL, *g[2] = {NULL, NULL};
  TRY(rs, xt = kiln_from_data(KILN_F64, 1, V(3), x));
  TRY(rs, wt = kiln_from_data(KILN_F64, 1, V(3), w));
  TRY(rs, yt = kiln_sum(kiln_add(kiln_tanh(kiln_mul(xt, wt)), kiln_mul(xt, xt)), 0, NULL, false));
  TRY_OK(rs, kiln_grad(&yt, NULL, 1, (kiln_tensor *[]){xt, wt}, 2, g));
  TRY_OK(rs, kiln_realize_many((kiln_tensor *[]){yt, g[0], g[1]}, 3));
done:
  settle(rs, P);
  check_values(P, "y", yt, &y, 1, 1e-12);
  check_values(P, "dx", g[0], dx, 3, 1e-12);
  check_values(P, "dw", g[1], dw, 3, 1e-12);
  kiln_scope_end();
}

static double times10(double v, void *ctx) { return v * 10; }
static double plus(double v, double w, void *ctx) { return v + w; }

/* Element callbacks (eager writes through views) between lazy readers. */
static void prog_callbacks(run_state *rs) {
  const char *P = "callbacks";
  double x[6], y[6];
  for (int i = 0; i < 6; i++) x[i] = i, y[i] = 2 * i;
  kiln_scope_begin();
  kiln_tensor *xt = NULL, *yt = NULL, *v;
  TRY(rs, xt = kiln_reshape(kiln_arange(KILN_F64, 0, 6, 1), 2, V(2, 3)));
  TRY(rs, yt = kiln_mul_scalar(xt, 2));
  TRY(rs, v = kiln_narrow(xt, 1, 0, 2));
  TRY_OK(rs, kiln_apply_(v, times10, NULL));
  for (int r = 0; r < 2; r++) x[r * 3] *= 10, x[r * 3 + 1] *= 10;
  TRY(rs, v = kiln_select(xt, 1, 2));
  TRY_OK(rs, kiln_map_(v, kiln_arange(KILN_F64, 5, 7, 1), plus, NULL));
  x[2] += 5, x[5] += 6;
done:
  settle(rs, P);
  check_values(P, "x", xt, x, 6, 0);
  check_values(P, "y", yt, y, 6, 0);
  kiln_scope_end();
}

/* ---------------------------------------------------------------- walk */

typedef struct program {
  const char *name;
  void (*run)(run_state *rs);
} program;

static void forget_caches(void) {
  rt_schedule_cache_clear();
  rt_kernel_cache_clear();
}

/* One run: armed at n (0 counts only; -1 off), then checked. */
static run_state run_once(const program *p, int64_t n) {
  int64_t pending = graph_pending_count();
  run_state rs = {0};
  fault_at = n;
  graph_fault_arm(n);
  p->run(&rs);
  if (n <= 0 && rs.failed) fail_msg("%s failed without a fault: %s", p->name, rs.msg);
  if (graph_pending_count() != pending)
    fail_msg("%s (fault %lld): %lld pending nodes left after every handle was released", p->name, (long long)n,
             (long long)(graph_pending_count() - pending));
  return rs;
}

static int64_t stride(void) {
  const char *e = getenv("KILN_TEST_FAULT_STRIDE");
  if (e && atoll(e) > 0) return atoll(e);
  return 0; /* by build */
}

/* Walks p's allocations: with `cold`, the caches are emptied before
 * every faulted run (first forces: lowering, compiling, caching); warm,
 * every force hits the schedule and kernel caches the clean run before
 * filled. */
static void walk(const program *p, int threads, bool cold) {
  char label[64];
  snprintf(label, sizeof label, "%s/%d%s", p->name, threads, cold ? "" : "/warm");
  const char *only = getenv("KILN_TEST_FAULT_PROGRAM"); /* e.g. "views/2" or "grad/1/warm" */
  if (only && strcmp(only, label) != 0 && strcmp(only, p->name) != 0) return;
  kiln_clear_error();
  kiln_set_num_threads(threads);
  run_once(p, -1); /* warm: one-time setup (the JIT, thread-local arrays) is done */
  if (cold) forget_caches();
  run_state c = run_once(p, 0);
  int64_t host = c.counted[GRAPH_FAULT_HOST], buffer = c.counted[GRAPH_FAULT_BUFFER], jit = c.counted[GRAPH_FAULT_JIT];
  int64_t total = host + buffer + jit, step = stride();
#ifdef __SANITIZE_ADDRESS__
  if (!step && cold) step = total / 50 + 1; /* each cold run compiles its kernels again */
#endif
  if (!step) step = 1;
  int64_t walked = 0, first = 1;
  const char *one = getenv("KILN_TEST_FAULT_ONLY"); /* one allocation, to debug it */
  if (one) first = atoll(one), total = first;
  for (int64_t n = first; n <= total; n += step, walked++) {
    if (cold) forget_caches();
    run_once(p, n);
    run_once(p, -1); /* the same program, no fault: right values */
  }
  printf("alloc_faults: %-16s %4lld allocations (%lld host, %lld buffer, %lld jit), %lld walked (stride %lld)\n", label,
         (long long)(host + buffer + jit), (long long)host, (long long)buffer, (long long)jit, (long long)walked,
         (long long)step);
  fflush(stdout);
}

static const program programs[] = {
    {"views", prog_views}, {"matmul", prog_matmul}, {"index", prog_index},
    {"io", prog_io},       {"profile", prog_profile}, {"grad", prog_grad},
    {"callbacks", prog_callbacks}, {"sort", prog_sort}, {"scatter", prog_scatter},
};

static void walk_views(void **state) { walk(&programs[0], 1, true); }
static void walk_matmul(void **state) { walk(&programs[1], 1, true); }
static void walk_index(void **state) { walk(&programs[2], 1, true); }
static void walk_io(void **state) { walk(&programs[3], 1, true); }
static void walk_profile(void **state) { walk(&programs[4], 1, true); }
static void walk_grad(void **state) { walk(&programs[5], 1, true); }
static void walk_callbacks(void **state) { walk(&programs[6], 1, true); }
static void walk_sort(void **state) { walk(&programs[7], 1, true); }
static void walk_scatter(void **state) { walk(&programs[8], 1, true); }
/* Two threads: a new schedule's kernels compile in parallel (realize.c's
 * prefetch), whose failures fall back to compiling on the forcing thread. */
static void walk_views_threads(void **state) { walk(&programs[0], 2, true); }
/* Cached schedules and kernels: rebinding, the cached decisions. */
static void walk_warm(void **state) {
  for (size_t i = 0; i < sizeof programs / sizeof *programs; i++) walk(&programs[i], 1, false);
}

/* A scope whose level cannot be allocated (the ninth: the first eight
 * live in thread-local storage) is merged into the enclosing one: the
 * tensors made in it are released at that one's end, never leaked, and
 * the matching kiln_scope_end closes nothing else. */
static void scope_that_cannot_open_is_merged(void **state) {
  int64_t pending = graph_pending_count();
  kiln_clear_error();
  for (int i = 0; i < 8; i++) kiln_scope_begin();
  graph_fault_arm(1);
  kiln_scope_begin(); /* the ninth level: its allocation fails */
  graph_fault_arm(-1);
  assert_int_equal(kiln_last_status(), KILN_ERR_OOM);
  assert_non_null(strstr(kiln_last_error(), "kiln_scope_begin: out of memory opening scope 9"));
  kiln_clear_error();
  kiln_tensor *a = kiln_zeros(KILN_F32, 1, V(3));
  kiln_scope_begin(); /* nested in the merged one: merged too */
  kiln_tensor *b = kiln_add_scalar(a, 1);
  assert_ptr_equal(kiln_keep(b), b);
  kiln_scope_end();
  kiln_scope_end(); /* the merged level: a and b stay with level 8 */
  assert_int_equal(kiln_last_status(), KILN_OK);
  assert_true(graph_pending_count() > pending);
  kiln_tensor *c = kiln_mul_scalar(b, 2);
  assert_int_equal(kiln_realize(c), KILN_OK);
  kiln_scope_end(); /* level 8 releases a, b and c */
  assert_int_equal(graph_pending_count(), pending);
  for (int i = 0; i < 7; i++) kiln_scope_end();
  kiln_scope_begin(); /* the stack works as before */
  for (int i = 0; i < 10; i++) kiln_scope_begin();
  kiln_tensor *d = kiln_ones(KILN_F32, 1, V(2));
  for (int i = 0; i < 10; i++) kiln_scope_end();
  kiln_scope_end();
  (void)d;
  assert_int_equal(graph_pending_count(), pending);
  assert_int_equal(kiln_last_status(), KILN_OK);
}

static int setup(void **state) {
  snprintf(tmp_dir, sizeof tmp_dir, "/tmp/kiln_faults_XXXXXX");
  return mkdtemp(tmp_dir) ? 0 : -1;
}

static int teardown(void **state) {
  const char *files[] = {"t.npy", "t.safetensors", "before.dot", "after.dot", "trace.json"};
  for (size_t i = 0; i < sizeof files / sizeof *files; i++) remove(tmp_path(files[i]));
  return rmdir(tmp_dir);
}

int main(void) {
  rt_disk_cache_set_dir(""); /* no on-disk kernel cache: the walk counts compiles' allocations */
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(scope_that_cannot_open_is_merged),
      cmocka_unit_test(walk_views),   cmocka_unit_test(walk_matmul),  cmocka_unit_test(walk_index),
      cmocka_unit_test(walk_io),      cmocka_unit_test(walk_profile), cmocka_unit_test(walk_grad),
      cmocka_unit_test(walk_callbacks), cmocka_unit_test(walk_sort), cmocka_unit_test(walk_scatter),
      cmocka_unit_test(walk_views_threads), cmocka_unit_test(walk_warm),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
