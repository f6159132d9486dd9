/*
 * llvm_target.c — the CPU the JIT compiles for, and what that CPU can do:
 * env KILN_CPU, the vector register width and count.
 *
 * KILN_CPU unset, empty or "native": the host, as LLVM sees it
 * (LLVMGetHostCPUName with LLVMGetHostCPUFeatures). Any other value is a
 * CPU name LLVM 19 knows — the levels x86-64 (SSE2), x86-64-v2 (SSE4.2),
 * x86-64-v3 (AVX2, FMA), x86-64-v4 (AVX-512), or a model such as haswell
 * or znver4 — and is compiled for with an empty feature string, so the
 * features are the ones that CPU implies, never the host's. That pins
 * the code: AVX2 kernels are built, tested and measured on an AVX-512
 * host (running code for a CPU the host is not a subset of faults).
 *
 * What the target can do is probed, not looked up, once per process: a
 * function adding two <16 x float> vectors is compiled to assembly through
 * the target's machine, and its register names say the widest vector
 * register (zmm: 512 bits, ymm: 256, else 128). The register count
 * follows from the width and the architecture: x86-64 has 32 vector
 * registers with AVX-512 (zmm0–31), 16 without (ymm/xmm0–15); AArch64
 * 32; other architectures are taken to have 16 and 128-bit vectors
 * (Kiln has not been built on them).
 *
 * An unknown name: LLVM 19's C API has no call that says whether it knows
 * a CPU. Creating a target machine for an unknown one prints "'foo' is not
 * a recognized processor for this target (ignoring processor)" on stderr
 * and carries on with a generic CPU. So the probe runs with stderr (fd 2)
 * redirected to a temporary file: that line makes the target unusable
 * (every compile fails with KILN_ERR_COMPILE and a message naming
 * KILN_CPU), anything else written meanwhile (by LLVM or another thread)
 * is copied back to stderr. KILN_CPU=help makes LLVM list its CPUs; the
 * list is copied back and the target is unusable too.
 *
 * Everything here is resolved once (pthread_once) and kept for the
 * process; llvm_shutdown does not reset it.
 */
#define _POSIX_C_SOURCE 200809L /* dup, fileno (test_kir_llvm builds this file without _GNU_SOURCE) */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>

#include "llvm_backend.h"
#include "llvm_internal.h"

static pthread_once_t once = PTHREAD_ONCE_INIT;
static llvm_target_info T; /* written once by resolve() */

/* A malloc'ed copy of an LLVM-allocated message, which is disposed. */
static char *take(char *llvm_msg) {
  if (!llvm_msg) return NULL;
  size_t n = strlen(llvm_msg) + 1;
  char *p = malloc(n);
  if (p) memcpy(p, llvm_msg, n);
  LLVMDisposeMessage(llvm_msg);
  return p;
}

static char *copy(const char *s) {
  size_t n = strlen(s) + 1;
  char *p = malloc(n);
  return p ? memcpy(p, s, n) : NULL;
}

LLVMTargetMachineRef llvm_target_machine(const llvm_target_info *t) {
  return LLVMCreateTargetMachine(t->target, t->triple, t->cpu, t->features, LLVMCodeGenLevelAggressive, LLVMRelocPIC,
                                 LLVMCodeModelSmall);
}

/* The probe's module: void @kiln_probe(ptr %p) { *p = *p + *p } on
 * <16 x float>, in ctx; asked to keep 512-bit operations legal (X86
 * otherwise may split them where a CPU prefers 256-bit vectors). */
static LLVMModuleRef probe_module(LLVMContextRef ctx, LLVMTargetMachineRef tm, const llvm_target_info *t) {
  LLVMModuleRef mod = LLVMModuleCreateWithNameInContext("kiln_probe", ctx);
  LLVMSetTarget(mod, t->triple);
  LLVMTargetDataRef td = LLVMCreateTargetDataLayout(tm);
  char *layout = LLVMCopyStringRepOfTargetData(td);
  LLVMSetDataLayout(mod, layout);
  LLVMDisposeMessage(layout);
  LLVMDisposeTargetData(td);
  LLVMTypeRef ptr = LLVMPointerTypeInContext(ctx, 0), vec = LLVMVectorType(LLVMFloatTypeInContext(ctx), 16);
  LLVMValueRef f = LLVMAddFunction(mod, "kiln_probe", LLVMFunctionType(LLVMVoidTypeInContext(ctx), &ptr, 1, 0));
  static const char key[] = "min-legal-vector-width", value[] = "512";
  LLVMAddAttributeAtIndex(f, LLVMAttributeFunctionIndex,
                          LLVMCreateStringAttribute(ctx, key, sizeof key - 1, value, sizeof value - 1));
  LLVMBuilderRef b = LLVMCreateBuilderInContext(ctx);
  LLVMPositionBuilderAtEnd(b, LLVMAppendBasicBlockInContext(ctx, f, "entry"));
  LLVMValueRef p = LLVMGetParam(f, 0), x = LLVMBuildLoad2(b, vec, p, "x");
  LLVMSetAlignment(x, 4);
  LLVMSetAlignment(LLVMBuildStore(b, LLVMBuildFAdd(b, x, x, "y"), p), 4);
  LLVMBuildRetVoid(b);
  LLVMDisposeBuilder(b);
  return mod;
}

/* The widest vector register the probe's assembly uses, in bits; 0 when
 * it could not be compiled. */
static int probe_vector_bits(const llvm_target_info *t) {
  LLVMTargetMachineRef tm = llvm_target_machine(t);
  if (!tm) return 0;
  LLVMContextRef ctx = LLVMContextCreate();
  LLVMModuleRef mod = probe_module(ctx, tm, t);
  LLVMMemoryBufferRef buf = NULL;
  char *msg = NULL;
  int bits = 0;
  if (!LLVMTargetMachineEmitToMemoryBuffer(tm, mod, LLVMAssemblyFile, &msg, &buf)) {
    size_t n = LLVMGetBufferSize(buf);
    char *text = malloc(n + 1);
    if (text) {
      memcpy(text, LLVMGetBufferStart(buf), n);
      text[n] = 0;
      bits = strstr(text, "zmm") ? 512 : strstr(text, "ymm") ? 256 : 128;
      free(text);
    }
    LLVMDisposeMemoryBuffer(buf);
  }
  LLVMDisposeMessage(msg);
  LLVMDisposeModule(mod);
  LLVMContextDispose(ctx);
  LLVMDisposeTargetMachine(tm);
  return bits;
}

/* Vector registers of the architecture of `triple` with vectors of
 * `bits` (file comment). */
static int vector_regs(const char *triple, int bits) {
  if (strncmp(triple, "x86_64", 6) == 0) return bits >= 512 ? 32 : 16;
  if (strncmp(triple, "aarch64", 7) == 0) return 32;
  return 16;
}

/* What was written to fd 2 while it pointed at tmp, NUL-terminated
 * (malloc'ed; NULL when it cannot be read). */
static char *read_back(FILE *tmp) {
  long n;
  if (fseek(tmp, 0, SEEK_END) != 0 || (n = ftell(tmp)) < 0 || fseek(tmp, 0, SEEK_SET) != 0) return NULL;
  char *s = malloc((size_t)n + 1);
  if (!s) return NULL;
  size_t got = fread(s, 1, (size_t)n, tmp);
  s[got] = 0;
  return s;
}

/* Whether LLVM knows T.cpu: a target machine is created with stderr
 * captured (file comment), and LLVM's warning looked for; whatever else
 * was written meanwhile is copied back to stderr. */
static bool cpu_known(void) {
  fflush(stderr);
  FILE *tmp = tmpfile();
  int saved = tmp ? dup(2) : -1;
  bool captured = saved >= 0 && dup2(fileno(tmp), 2) >= 0;
  LLVMTargetMachineRef tm = llvm_target_machine(&T);
  if (saved >= 0) {
    dup2(saved, 2);
    close(saved);
  }
  if (tm) LLVMDisposeTargetMachine(tm);
  char *said = captured ? read_back(tmp) : NULL;
  if (tmp) fclose(tmp);
  bool unknown = said && strstr(said, "is not a recognized processor");
  if (said && !unknown && *said) fputs(said, stderr);
  free(said);
  return !unknown && strcmp(T.cpu, "help") != 0;
}

/* Checks the CPU, then probes its vectors (file comment): sets T.err
 * when the target is unusable. Compiling for a CPU LLVM does not know
 * can end the process (report_fatal_error), so nothing is compiled then. */
static void check_and_probe(void) {
  if (!cpu_known()) {
    if (strcmp(T.cpu, "help") == 0)
      snprintf(T.err, sizeof T.err, "KILN_CPU=help: LLVM listed the CPUs it knows for %s on stderr; set KILN_CPU "
               "to one of them (or native)", T.triple);
    else
      snprintf(T.err, sizeof T.err,
               "KILN_CPU=%s: LLVM does not know this CPU for %s (use native, x86-64, x86-64-v2, x86-64-v3, "
               "x86-64-v4 or a name that KILN_CPU=help or `llc-19 -mcpu=help` lists)",
               T.cpu, T.triple);
  } else if ((T.vector_bits = probe_vector_bits(&T)) == 0) {
    snprintf(T.err, sizeof T.err, "cannot compile for CPU %s (%s): the target machine failed", T.cpu, T.triple);
  }
}

/* Fills T: the native target, the CPU (KILN_CPU or the host), the probe. */
static void resolve(void) {
  if (LLVMInitializeNativeTarget() || LLVMInitializeNativeAsmPrinter()) {
    snprintf(T.err, sizeof T.err, "no native LLVM target");
    return;
  }
  const char *env = getenv("KILN_CPU");
  T.pinned = env && *env && strcmp(env, "native") != 0;
  T.triple = take(LLVMGetDefaultTargetTriple());
  T.cpu = T.pinned ? copy(env) : take(LLVMGetHostCPUName());
  T.features = T.pinned ? copy("") : take(LLVMGetHostCPUFeatures());
  if (!T.triple || !T.cpu || !T.features) {
    snprintf(T.err, sizeof T.err, "out of memory");
    return;
  }
  char *msg = NULL;
  if (LLVMGetTargetFromTriple(T.triple, &T.target, &msg)) {
    snprintf(T.err, sizeof T.err, "no LLVM target for %s: %s", T.triple, msg ? msg : "unknown");
    LLVMDisposeMessage(msg);
    return;
  }
  check_and_probe();
  T.vector_regs = vector_regs(T.triple, T.vector_bits);
  T.ok = T.err[0] == 0;
}

const llvm_target_info *llvm_target(void) {
  pthread_once(&once, resolve);
  return &T;
}

int llvm_target_vector_bits(void) {
  const llvm_target_info *t = llvm_target();
  return t->ok ? t->vector_bits : 0;
}

int llvm_target_vector_regs(void) {
  const llvm_target_info *t = llvm_target();
  return t->ok ? t->vector_regs : 0;
}

const char *llvm_target_cpu(void) {
  const llvm_target_info *t = llvm_target();
  return t->ok ? t->cpu : NULL;
}

const char *llvm_target_error(void) {
  const llvm_target_info *t = llvm_target();
  return t->ok ? NULL : t->err;
}

/* Vector width the loop vectoriser aims for: 512 bits where the target
 * has 512-bit vectors (LLVM's default for such CPUs is 256, which halves
 * the lanes of every kernel whose reductions accumulate in F64), else its
 * default. KILN_VECTOR_BITS=512 or 256 overrides. */
bool llvm_wide_vectors(void) {
  static atomic_int wide = -1; /* read once; threads compiling at once may race to it */
  int w = atomic_load_explicit(&wide, memory_order_relaxed);
  if (w < 0) {
    const char *env = getenv("KILN_VECTOR_BITS");
    w = env ? strcmp(env, "512") == 0 : llvm_target_vector_bits() >= 512;
    atomic_store_explicit(&wide, w, memory_order_relaxed);
  }
  return w;
}
