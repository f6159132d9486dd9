/*
 * gemm_tune.c — GFLOP/s of the generated GEMM (KILN_GEMM=jit) against
 * OpenBLAS as Kiln calls it (KILN_GEMM=blas), back to back in one
 * process, on the shapes of docs/internals.md ("The generated GEMM"),
 * beside the machine's FMA peak for the JIT target's vector width
 * (bench/peak.c, the best of 15 short runs).
 *
 *   gemm_tune [--threads T] [--f64] [--reps-ms MS]
 *             [--mr MR --nv NV --bits B --regs R] [--mc MC --kc KC --nc NC]
 *             [--dump-ukr FILE]
 *             [MxNxK[:nn|nt|tn] ...]
 *
 * Each product is timed through the public API (kiln_matmul of realized
 * operands, forced), best of repeated runs for at least --reps-ms ms; the
 * micro-kernel override and blocking flags are the tuning knobs
 * (llvm_gemm_override, rt_gemm_set_blocking). Layouts: nn A and B
 * contiguous; nt B given as the transpose of a contiguous [N, K] (the MLP
 * forward x·Wᵀ); tn A as the transpose of a contiguous [K, M] (a weight
 * gradient gᵀ·x). White-box: links kiln_static.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "kiln/kiln.h"
#include "llvm_backend.h"
#include "rt_internal.h"


static double now_s(void) { return 1e-9 * (double)bench_now_ns(); }

/* ------------------------------------------------------------- FMA peak */

/* F32 FMA peak of `threads` threads at once for the JIT target's vector
 * width, GFLOP/s, best of 15 short runs (a shared machine preempts some;
 * bench/peak.c); 0 off x86-64. */
static double fma_peak(int threads) {
  double g = bench_fma_peak(threads, llvm_target_vector_bits(), 15, 2000000, NULL);
  return g > 0 ? g : 0;
}

/* ------------------------------------------------------------- products */

typedef struct shape {
  int64_t m, n, k;
  char layout[3];
} shape;

/* A random realized [rows, cols] tensor of dtype (values in [-1, 1)). */
static kiln_tensor *random_matrix(kiln_dtype dt, int64_t rows, int64_t cols) {
  kiln_tensor *t = kiln_rand(dt, 2, (int64_t[]){rows, cols});
  kiln_tensor *u = kiln_sub_scalar(kiln_mul_scalar(t, 2), 1);
  kiln_realize(u);
  return u;
}

/* Best seconds of one forced product over at least ms milliseconds. */
static double time_product(kiln_tensor *a, kiln_tensor *b, double ms) {
  double best = 1e30, start = now_s();
  for (int rep = 0; rep < 3 || now_s() - start < ms / 1e3; rep++) {
    double t0 = now_s();
    kiln_tensor *c = kiln_matmul(a, b);
    if (kiln_realize(c) != KILN_OK) {
      fprintf(stderr, "gemm_tune: %s\n", kiln_last_error());
      exit(1);
    }
    double t = now_s() - t0;
    kiln_release(c);
    if (t < best) best = t;
  }
  return best;
}

/* Name of the kernel that ran the product (profile record). */
static void kernel_name(kiln_tensor *a, kiln_tensor *b, char *out, size_t len) {
  kiln_profile_begin();
  kiln_tensor *c = kiln_matmul(a, b);
  kiln_realize(c);
  kiln_profile_end();
  kiln_kernel_record r;
  snprintf(out, len, "?");
  for (int i = 0; i < kiln_profile_count(); i++)
    if (kiln_profile_get(i, &r) == KILN_OK) snprintf(out, len, "%s", r.name);
  kiln_release(c);
}

static void run_shape(const shape *s, kiln_dtype dt, double ms) {
  kiln_scope_begin();
  bool ta = s->layout[0] == 't', tb = s->layout[1] == 't';
  kiln_tensor *a = ta ? kiln_t(random_matrix(dt, s->k, s->m)) : random_matrix(dt, s->m, s->k);
  kiln_tensor *b = tb ? kiln_t(random_matrix(dt, s->n, s->k)) : random_matrix(dt, s->k, s->n);
  double flop = 2.0 * (double)s->m * (double)s->n * (double)s->k;
  char name[96];
  rt_gemm_set_mode(2);
  time_product(a, b, 50);
  double tb_s = time_product(a, b, ms);
  rt_gemm_set_mode(1);
  kernel_name(a, b, name, sizeof name); /* compiles the micro-kernel too */
  double tj_s = time_product(a, b, ms);
  rt_gemm_set_mode(2);
  double tb2_s = time_product(a, b, ms); /* again, after: the machine is shared */
  if (tb2_s < tb_s) tb_s = tb2_s;
  rt_gemm_set_mode(-1);
  printf(" %-4s %10.1f %10.1f %7.2f  %s\n", s->layout, flop / tb_s / 1e9, flop / tj_s / 1e9, tb_s / tj_s,
         name);
  kiln_scope_end();
}

static bool parse_shape(const char *arg, shape *s) {
  long long m, n, k;
  char lay[8] = "nn";
  int got = sscanf(arg, "%lldx%lldx%lld:%2s", &m, &n, &k, lay);
  if (got < 3) return false;
  *s = (shape){.m = m, .n = n, .k = k};
  memcpy(s->layout, lay, 2);
  s->layout[2] = 0;
  return true;
}

int main(int argc, char **argv) {
  static const shape defaults[] = {
      {2048, 2048, 2048, "nn"}, {128, 256, 784, "nt"}, {784, 256, 128, "tn"}, {128, 784, 256, "nn"},
      {64, 25088, 288, "nn"},   {128, 10, 256, "nt"},  {1024, 1024, 1024, "nn"}, {512, 512, 512, "nn"},
  };
  shape shapes[64];
  int n_shapes = 0, threads = 0, mr = 0, nv = 0, bits = 0, regs = 0;
  const char *dump = NULL;
  long long mc = 0, kc = 0, nc = 0;
  double ms = 400;
  kiln_dtype dt = KILN_F32;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : "0";
    if (!strcmp(a, "--threads")) threads = atoi(v), i++;
    else if (!strcmp(a, "--f64")) dt = KILN_F64;
    else if (!strcmp(a, "--dump-ukr")) dump = v, i++;
    else if (!strcmp(a, "--reps-ms")) ms = atof(v), i++;
    else if (!strcmp(a, "--mr")) mr = atoi(v), i++;
    else if (!strcmp(a, "--nv")) nv = atoi(v), i++;
    else if (!strcmp(a, "--bits")) bits = atoi(v), i++;
    else if (!strcmp(a, "--regs")) regs = atoi(v), i++;
    else if (!strcmp(a, "--mc")) mc = atoll(v), i++;
    else if (!strcmp(a, "--kc")) kc = atoll(v), i++;
    else if (!strcmp(a, "--nc")) nc = atoll(v), i++;
    else if (n_shapes < 64 && parse_shape(a, &shapes[n_shapes])) n_shapes++;
    else {
      fprintf(stderr, "gemm_tune: bad argument %s (see the head of bench/gemm_tune.c)\n", a);
      return 2;
    }
  }
  if (!n_shapes) memcpy(shapes, defaults, sizeof defaults), n_shapes = (int)(sizeof defaults / sizeof defaults[0]);
  if (threads > 0) kiln_set_num_threads(threads);
  llvm_gemm_override(bits, regs, mr, nv);
  rt_gemm_set_blocking(mc, kc, nc);
  llvm_gemm_spec spec;
  char err[256];
  if (llvm_gemm_choose(dt, &spec, err, sizeof err) != KILN_OK) {
    fprintf(stderr, "gemm_tune: %s\n", err);
    return 1;
  }
  if (dump) { /* the micro-kernel's first 4 KiB of code, for objdump -b binary */
    llvm_gemm_fn fn;
    FILE *f = fopen(dump, "wb");
    if (f && llvm_gemm_kernel(&spec, NULL, &fn, NULL, err, sizeof err) == KILN_OK) {
      void *p;
      memcpy(&p, &fn, sizeof p);
      fwrite(p, 1, 4096, f);
    }
    if (f) fclose(f);
  }
  rt_gemm_blocking blk = rt_gemm_blocking_for(spec.mr, spec.nr, dt == KILN_F64 ? 8 : 4);
  int nt = rt_pool_threads();
  double p1 = fma_peak(1), pn = fma_peak(nt);
  printf("micro-kernel %dx%d (vl %d), MC %lld KC %lld NC %lld, %d threads, %s\n", spec.mr, spec.nr, spec.vl,
         (long long)blk.mc, (long long)blk.kc, (long long)blk.nc, nt, dt == KILN_F64 ? "F64" : "F32");
  printf("F32 FMA peak: %.1f GFLOP/s on 1 thread, %.1f on %d (F64: half)\n", p1, pn, nt);
  printf("%-22s %-4s %10s %10s %7s  %s\n", "M x N x K", "lay", "blas GF/s", "jit GF/s", "jit/bl", "kernel");
  for (int i = 0; i < n_shapes; i++) {
    char label[64];
    snprintf(label, sizeof label, "%lldx%lldx%lld", (long long)shapes[i].m, (long long)shapes[i].n,
             (long long)shapes[i].k);
    printf("%-22s", label);
    fflush(stdout);
    run_shape(&shapes[i], dt, ms);
  }
  return 0;
}
