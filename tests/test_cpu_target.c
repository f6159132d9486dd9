/*
 * test_cpu_target.c — KILN_CPU pins the CPU the JIT compiles for
 * (codegen_llvm/llvm_target.c): under x86-64-v3 (AVX2) and x86-64 (SSE2)
 * kernels compute the right values, the disk cache's key names the
 * pinned CPU, the target reports 256- and 128-bit vectors and 16
 * registers, and an elementwise F32 kernel's assembly uses no wider
 * register than the pin allows; x86-64-v4's has zmm registers (code for
 * a level the host lacks is compiled, never run); native is the
 * host; an unknown name is a clear KILN_ERR_COMPILE, with nothing of
 * LLVM's warning on stderr. KILN_CPU is read once per process, so each
 * case runs in a child process.
 */
#define _POSIX_C_SOURCE 200809L /* fork, setenv, dup2, fileno */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "kiln/kiln.h"
#include "passes.h"
#include "rt_internal.h"
#include "kernel_util.h"
#include "test_util.h"

#define V(...) ((int64_t[]){__VA_ARGS__})

/* A failed check in a child: says which on stderr (the parent shows it)
 * and gives the exit status. */
static int child_fail(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  return code;
}

/* Runs fn in a child with KILN_CPU=cpu (NULL: unset); its exit status,
 * its stderr in err [n]. */
static int in_child(const char *cpu, int (*fn)(void), char *err, size_t n) {
  FILE *f = tmpfile();
  assert_non_null(f);
  fflush(stderr);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    dup2(fileno(f), 2);
    if (cpu) setenv("KILN_CPU", cpu, 1);
    else unsetenv("KILN_CPU");
    _exit(fn());
  }
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  rewind(f);
  size_t got = fread(err, 1, n - 1, f);
  err[got] = 0;
  fclose(f);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
}

/* Runs fn under KILN_CPU=cpu and fails the test, with the child's
 * stderr, unless it exits 0. */
static void expect_child_ok(const char *cpu, int (*fn)(void)) {
  char err[4096];
  int rc = in_child(cpu, fn, err, sizeof err);
  if (rc != 0) fail_msg("KILN_CPU=%s: child exited %d: %s", cpu ? cpu : "(unset)", rc, err);
}

/* ----------------------------------------------------------- values */

/* n F32 values of t (forced), or NULL. The caller frees. */
static float *values(kiln_tensor *t, int64_t n) {
  float *v = malloc(sizeof *v * (size_t)n);
  if (v && kiln_read(t, v, sizeof *v * (size_t)n) != KILN_OK) {
    free(v);
    return NULL;
  }
  return v;
}

static bool close_to(double got, double want) { return fabs(got - want) <= 1e-5 + 1e-5 * fabs(want); }

/* tanh(x*1.5 + 0.25) * exp(-x) over 1003 elements (a vector body and
 * a tail, inline F32 math): 0, or the index of the first wrong one + 1. */
static int64_t wrong_elementwise(void) {
  int64_t n = 1003;
  kiln_tensor *x = kiln_rand(KILN_F32, 1, V(n));
  kiln_tensor *y = kiln_mul(kiln_tanh(kiln_add_scalar(kiln_mul_scalar(x, 1.5), 0.25)), kiln_exp(kiln_neg(x)));
  float *xv = values(x, n), *yv = values(y, n);
  int64_t bad = xv && yv ? 0 : 1;
  for (int64_t i = 0; i < n && !bad; i++)
    if (!close_to(yv[i], tanh(xv[i] * 1.5 + 0.25) * exp(-(double)xv[i]))) bad = i + 1;
  free(xv), free(yv);
  return bad;
}

/* Softmax over rows of [37, 100] and sums over dim 1 of [64, 257]. */
static int64_t wrong_rows(void) {
  kiln_tensor *x = kiln_rand(KILN_F32, 2, V(37, 100)), *z = kiln_rand(KILN_F32, 2, V(64, 257));
  kiln_tensor *sm = kiln_softmax(x, 1), *s = kiln_sum(z, 1, (int[]){1}, false);
  float *xv = values(x, 3700), *smv = values(sm, 3700), *zv = values(z, 64 * 257), *sv = values(s, 64);
  int64_t bad = xv && smv && zv && sv ? 0 : 1;
  for (int r = 0; r < 37 && !bad; r++) {
    double m = -INFINITY, tot = 0;
    for (int j = 0; j < 100; j++) m = fmax(m, xv[r * 100 + j]);
    for (int j = 0; j < 100; j++) tot += exp(xv[r * 100 + j] - m);
    for (int j = 0; j < 100 && !bad; j++)
      if (!close_to(smv[r * 100 + j], exp(xv[r * 100 + j] - m) / tot)) bad = 2;
  }
  for (int r = 0; r < 64 && !bad; r++) {
    double tot = 0;
    for (int j = 0; j < 257; j++) tot += zv[r * 257 + j];
    if (fabs(sv[r] - tot) > 1e-4 * tot) bad = 3;
  }
  free(xv), free(smv), free(zv), free(sv);
  return bad;
}

/* relu(a@b + bias), [33, 65] x [65, 47]: the GEMM and its epilogue. */
static int64_t wrong_matmul(void) {
  kiln_tensor *a = kiln_sub_scalar(kiln_rand(KILN_F32, 2, V(33, 65)), 0.5);
  kiln_tensor *b = kiln_rand(KILN_F32, 2, V(65, 47)), *bias = kiln_sub_scalar(kiln_rand(KILN_F32, 1, V(47)), 0.5);
  kiln_tensor *y = kiln_relu(kiln_add(kiln_matmul(a, b), bias));
  float *av = values(a, 33 * 65), *bv = values(b, 65 * 47), *cv = values(bias, 47), *yv = values(y, 33 * 47);
  int64_t bad = av && bv && cv && yv ? 0 : 1;
  for (int i = 0; i < 33 && !bad; i++)
    for (int j = 0; j < 47 && !bad; j++) {
      double t = cv[j];
      for (int k = 0; k < 65; k++) t += (double)av[i * 65 + k] * bv[k * 47 + j];
      if (!close_to(yv[i * 47 + j], t > 0 ? t : 0)) bad = 4;
    }
  free(av), free(bv), free(cv), free(yv);
  return bad;
}

/* 0 when every kernel above computes the right values. */
static int right_values(void) {
  kiln_manual_seed(7);
  kiln_scope_begin();
  int64_t e = wrong_elementwise(), r = wrong_rows(), m = wrong_matmul();
  kiln_scope_end();
  if (e) return child_fail(10, "elementwise: element %lld wrong (%s)", (long long)e - 1, kiln_last_error());
  if (r) return child_fail(11, "softmax or sum wrong (case %lld; %s)", (long long)r, kiln_last_error());
  if (m) return child_fail(12, "relu(a@b + bias) wrong (case %lld; %s)", (long long)m, kiln_last_error());
  return 0;
}

/* ------------------------------------------------- what the target is */

/* The assembly of t's kernel (malloc'ed), or NULL. */
static char *kernel_asm(kiln_tensor *t) {
  kir_kernel k;
  lower_for_test(t, &k);
  char *text = NULL, err[512];
  if (llvm_compile_asm(&k, &text, err, sizeof err) != KILN_OK) fprintf(stderr, "llvm_compile_asm: %s\n", err);
  kir_free(&k);
  return text;
}

/* The assembly of the kernel computing x*y + z over 4096 F32 elements
 * (malloc'ed), or NULL. */
static char *elementwise_asm(void) {
  kiln_scope_begin();
  kiln_tensor *x = kiln_rand(KILN_F32, 1, V(4096)), *y = kiln_rand(KILN_F32, 1, V(4096));
  kiln_tensor *z = kiln_rand(KILN_F32, 1, V(4096));
  kiln_realize(x), kiln_realize(y), kiln_realize(z);
  char *text = kernel_asm(kiln_add(kiln_mul(x, y), z));
  kiln_scope_end();
  return text;
}

/* 0 when a 2x2 pooling gradient's kernel is vectorised: g [8, 4, 14, 14]
 * broadcast over each window's taps, times x read through the windows,
 * written [8, 4, 28, 28] (rows of 14 windows, the taps at stride 2). On
 * targets without a masked tail codegen_llvm/llvm_lower.c forces LLVM's
 * vectoriser on such short rows, which its cost model leaves scalar. */
static int short_rows_vectorised(void) {
  kiln_scope_begin();
  kiln_tensor *x = kiln_rand(KILN_F32, 4, (int64_t[]){8, 4, 28, 28});
  kiln_tensor *g = kiln_rand(KILN_F32, 6, (int64_t[]){8, 4, 14, 1, 14, 1});
  kiln_realize(x), kiln_realize(g);
  kiln_tensor *win = kiln_view(x, 6, (int64_t[]){8, 4, 14, 2, 14, 2});
  kir_kernel k;
  lower_for_test(kiln_mul(win, g), &k);
  char *ir = NULL, err[512] = "";
  llvm_kernel_fn fn = NULL;
  if (llvm_compile(&k, &fn, &ir, err, sizeof err) != KILN_OK) fprintf(stderr, "llvm_compile: %s\n", err);
  kir_free(&k);
  kiln_scope_end();
  bool packed = ir && (strstr(ir, "fmul <4 x float>") || strstr(ir, "fmul <8 x float>") || strstr(ir, "fmul <16 x float>"));
  free(ir);
  return packed ? 0 : child_fail(27, "2x2 windows over rows of 28: no 4-, 8- or 16-lane multiply in the kernel");
}

/* Checks the target reports `bits`-bit vectors, `regs` registers, names
 * `cpu` in the disk cache's key (with the vector width the vectoriser
 * aims for) and kiln_cpu_target, and that the
 * elementwise kernel's assembly uses `reg` ("zmm", "ymm", "xmm") and no
 * wider one. */
static int target_is(const char *cpu, int bits, int regs, const char *reg) {
  if (llvm_target_vector_bits() != bits) return child_fail(20, "vector bits %d, want %d", llvm_target_vector_bits(), bits);
  if (llvm_target_vector_regs() != regs) return child_fail(21, "vector regs %d, want %d", llvm_target_vector_regs(), regs);
  char name[64] = "", want[80];
  int b = 0, r = 0;
  if (kiln_cpu_target(name, sizeof name, &b, &r) != KILN_OK || strcmp(name, cpu) != 0 || b != bits || r != regs)
    return child_fail(23, "kiln_cpu_target: \"%s\" %d %d (%s)", name, b, r, kiln_last_error());
  char *id = llvm_target_id();
  snprintf(want, sizeof want, " %s ", cpu);
  /* vec512: kernels ask for 512-bit vectors (llvm_wide_vectors) */
  bool named = id && strstr(id, want) && strstr(id, bits >= 512 ? " vec512" : " vec0");
  if (!named) fprintf(stderr, "target id \"%s\" does not name %s\n", id ? id : "(null)", cpu);
  free(id);
  if (!named) return 24;
  char *text = elementwise_asm();
  if (!text) return 25;
  bool has = strstr(text, reg) != NULL;
  bool wider = (bits < 512 && strstr(text, "zmm")) || (bits < 256 && strstr(text, "ymm"));
  free(text);
  if (!has || wider) return child_fail(26, "the kernel's assembly: %s %s, wider registers %s", reg, has ? "used" : "missing",
                                 wider ? "used" : "not used");
  return 0;
}

/* x86-64-v3 code: run only where the host has AVX2 and FMA. */
static int avx2_child(void) {
  int rc = target_is("x86-64-v3", 256, 16, "ymm");
  if (!rc) rc = short_rows_vectorised();
  if (rc || !__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return rc;
  return right_values();
}

static int sse2_child(void) {
  int rc = target_is("x86-64", 128, 16, "xmm");
  return rc ? rc : right_values();
}

/* AVX-512 code: compiled everywhere, run only where the host has it. */
static int avx512_child(void) {
  int rc = target_is("x86-64-v4", 512, 32, "zmm");
  if (!rc) rc = short_rows_vectorised();
  if (rc || !__builtin_cpu_supports("avx512f")) return rc;
  return right_values();
}

/* "native" is the host: its widest vectors, and not a pinned level. */
static int native_child(void) {
  int want = __builtin_cpu_supports("avx512f") ? 512 : __builtin_cpu_supports("avx") ? 256 : 128;
  if (llvm_target_vector_bits() != want) return child_fail(30, "native: %d bits, want %d", llvm_target_vector_bits(), want);
  const char *cpu = llvm_target_cpu();
  if (!cpu || strcmp(cpu, "native") == 0 || strncmp(cpu, "x86-64", 6) == 0)
    return child_fail(31, "native: CPU %s", cpu ? cpu : "(null)");
  return right_values();
}

/* An unknown CPU: every force fails with KILN_ERR_COMPILE naming it. */
static int unknown_child(void) {
  kiln_tensor *x = kiln_add_scalar(kiln_rand(KILN_F32, 1, V(100)), 1);
  if (kiln_realize(x) != KILN_ERR_COMPILE) return child_fail(40, "force: %s", kiln_status_name(kiln_last_status()));
  const char *msg = kiln_last_error();
  if (!strstr(msg, "KILN_CPU=not-a-cpu: LLVM does not know this CPU")) return child_fail(41, "message: %s", msg);
  kiln_clear_error();
  int bits = -1;
  if (kiln_cpu_target(NULL, 0, &bits, NULL) != KILN_ERR_COMPILE || bits != -1) return child_fail(42, "kiln_cpu_target");
  kiln_clear_error();
  return llvm_target_id() == NULL ? 0 : child_fail(43, "a target id for an unknown CPU");
}

/* ------------------------------------------------------------- tests */

static void pinned_avx2(void **state) { expect_child_ok("x86-64-v3", avx2_child); }
static void pinned_sse2(void **state) { expect_child_ok("x86-64", sse2_child); }
static void pinned_avx512(void **state) { expect_child_ok("x86-64-v4", avx512_child); }
static void native_is_the_host(void **state) {
  expect_child_ok("native", native_child);
  expect_child_ok(NULL, native_child);
  expect_child_ok("", native_child);
}

static void unknown_cpu_is_an_error(void **state) {
  char err[4096];
  int rc = in_child("not-a-cpu", unknown_child, err, sizeof err);
  if (rc != 0) fail_msg("child exited %d: %s", rc, err);
  assert_string_equal(err, ""); /* LLVM's warning was caught, not printed */
}

int main(void) {
#if defined(__x86_64__)
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(pinned_avx2),        cmocka_unit_test(pinned_sse2),
      cmocka_unit_test(pinned_avx512),      cmocka_unit_test(native_is_the_host),
      cmocka_unit_test(unknown_cpu_is_an_error),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
#else
  return 0; /* the pinned names are x86-64's */
#endif
}
