/*
 * llvm_jit.c — the CPU backend's driver: one process-wide ORC LLJIT for the
 * target CPU (llvm_target.c: the host, or KILN_CPU), the O2 pass
 * pipeline, and llvm_compile/llvm_shutdown. Modules that are not kernel
 * IR (the GEMM micro-kernels of llvm_gemm.c) take the same path through
 * llvm_compile_module, given a callback that fills the module.
 *
 * Invariants:
 *  - the JIT is created lazily by the first llvm_compile and lives until
 *    llvm_shutdown, which frees it and all compiled code; llvm_shutdown must
 *    not run while another thread is inside llvm_compile;
 *  - every access to the JIT (creation, adding an object, looking a symbol
 *    up, which links it) holds `jit_lock`: LLJIT through the C API is not
 *    safe for concurrent adds. Building, optimising and compiling the
 *    module to an object file happen outside the lock, in a fresh
 *    LLVMContext per compile, with a TargetMachine per compile
 *    (TargetMachines cache subtargets and are not safe to share between
 *    threads), so several kernels compile at once;
 *  - a module's fill callback (llvm_compile_module) runs outside the lock,
 *    on the compile's own context, like a kernel's lowering: it must not
 *    call back into this file;
 *  - each kernel's symbol is unique (sanitised kernel name + counter) and
 *    gets its own ResourceTracker, removed again if compiling it fails;
 *  - the test hook graph/fault.h counts each link as a GRAPH_FAULT_JIT
 *    allocation; the armed one fails as a failed symbol lookup would;
 *  - nothing is printed: session errors are captured into the message, and
 *    each compile's LLVMContext has a diagnostic handler (diagnose) that
 *    drops remarks, warnings and notes (LLVM's default handler prints them
 *    to stderr: "remark: <unknown>:0:0: loop not vectorized: ..." for a
 *    loop with a vector-width hint it cannot vectorise) and turns an error
 *    into the compile's error instead of LLVM's exit(1).
 * The main JITDylib resolves undefined symbols from the process (libm).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <llvm-c/Analysis.h>
#include <llvm-c/Error.h>
#include <llvm-c/LLJIT.h>
#include <llvm-c/Orc.h>
#include <llvm-c/Support.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <llvm-c/Transforms/PassBuilder.h>

#include "llvm_backend.h"
#include "fault.h"
#include "llvm_internal.h"

static pthread_mutex_t jit_lock = PTHREAD_MUTEX_INITIALIZER;

/* The process-wide JIT; all fields guarded by jit_lock. */
static struct {
  LLVMOrcLLJITRef jit;
  const llvm_target_info *t; /* the target (llvm_target.c), set with jit */
  char *layout;              /* strdup'ed */
  unsigned long long counter;  /* kernel ids handed out */
  unsigned long long compiled; /* kernels linked (llvm_compile_count) */
  char session_err[256]; /* last error the ExecutionSession reported */
} g;

/* strdup is POSIX, not C11. */
static char *dup_str(const char *s) {
  size_t n = strlen(s) + 1;
  char *p = malloc(n);
  return p ? memcpy(p, s, n) : NULL;
}

/* Writes "llvm_compile: <kernel>: <what><detail>" to err. */
static int set_err(char *err, size_t errlen, const char *kname, const char *what, const char *detail) {
  if (err && errlen) snprintf(err, errlen, "llvm_compile: %s: %s%s", kname, what, detail ? detail : "");
  return KILN_ERR_COMPILE;
}

/* Consumes e; copies its message to err. */
static int set_llvm_err(char *err, size_t errlen, const char *kname, const char *what, LLVMErrorRef e) {
  char *m = LLVMGetErrorMessage(e);
  set_err(err, errlen, kname, what, m);
  LLVMDisposeErrorMessage(m);
  return KILN_ERR_COMPILE;
}

static void report_session_error(void *ctx, LLVMErrorRef e) {
  (void)ctx;
  char *m = LLVMGetErrorMessage(e);
  snprintf(g.session_err, sizeof g.session_err, "%s", m);
  LLVMDisposeErrorMessage(m);
}

/* Kernels are compiled to position-independent objects that the JIT's
 * linker places anywhere (calls into libm go through its stubs). */
static LLVMTargetMachineRef kernel_machine(void) { return llvm_target_machine(g.t); }

/* The one process-wide switch of LLVM's loop vectorizer Kiln sets, where
 * it aims for 512-bit vectors (llvm_wide_vectors): masked interleaved
 * access groups. A loop whose body reads or writes a[2i] and a[2i + 1]
 * (an unrolled innermost dim of 2: max pooling's windows and their
 * gradient) with a masked tail (short_row in llvm_lower.c: rows of 14) is
 * otherwise vectorized with gathers and scatters; with it, one masked
 * wide load or store and shuffles (docs/internals.md, Forcing: the
 * compile). Parsed once per process, after the target is known: LLVM's
 * parser exits the process on a repeated or unknown option. */
static pthread_once_t options_once = PTHREAD_ONCE_INIT;

static void set_vectorizer_options(void) {
  if (!llvm_wide_vectors()) return;
  const char *argv[] = {"kiln", "-enable-masked-interleaved-mem-accesses"};
  LLVMParseCommandLineOptions(2, argv, NULL);
}

/* Creates the LLJIT (caller holds jit_lock) for the resolved target t,
 * opt level aggressive; process symbols visible from the main JITDylib. */
static LLVMErrorRef create_jit(const llvm_target_info *t) {
  g.t = t;
  pthread_once(&options_once, set_vectorizer_options);
  LLVMTargetMachineRef tm = kernel_machine();
  if (!tm) return LLVMCreateStringError("cannot create a target machine for the target CPU");
  LLVMErrorRef e;
  LLVMOrcLLJITBuilderRef builder = LLVMOrcCreateLLJITBuilder();
  /* both calls consume their argument */
  LLVMOrcLLJITBuilderSetJITTargetMachineBuilder(builder,
                                                LLVMOrcJITTargetMachineBuilderCreateFromTargetMachine(tm));
  e = LLVMOrcCreateLLJIT(&g.jit, builder); /* consumes builder */
  if (e) return e;
  LLVMOrcExecutionSessionSetErrorReporter(LLVMOrcLLJITGetExecutionSession(g.jit), report_session_error,
                                          NULL);
  LLVMOrcDefinitionGeneratorRef gen;
  e = LLVMOrcCreateDynamicLibrarySearchGeneratorForProcess(&gen, LLVMOrcLLJITGetGlobalPrefix(g.jit),
                                                           NULL, NULL);
  if (e) return e;
  LLVMOrcJITDylibAddGenerator(LLVMOrcLLJITGetMainJITDylib(g.jit), gen);
  g.layout = dup_str(LLVMOrcLLJITGetDataLayoutStr(g.jit));
  return g.layout ? NULL : LLVMCreateStringError("out of memory");
}

static void dispose_jit(void) {
  if (g.jit) LLVMConsumeError(LLVMOrcDisposeLLJIT(g.jit));
  g.jit = NULL;
  free(g.layout);
  g.layout = NULL;
}

/* Under jit_lock: makes sure the JIT exists; returns a fresh kernel id.
 * An unusable target (an unknown KILN_CPU) fails every compile. */
static int acquire_id(unsigned long long *id, char *err, size_t errlen, const char *kname) {
  const llvm_target_info *t = llvm_target();
  if (!t->ok) return set_err(err, errlen, kname, t->err, NULL);
  int rc = KILN_OK;
  pthread_mutex_lock(&jit_lock);
  if (!g.jit) {
    LLVMErrorRef e = create_jit(t);
    if (e) {
      rc = set_llvm_err(err, errlen, kname, "creating the JIT: ", e);
      dispose_jit();
    }
  }
  *id = ++g.counter;
  pthread_mutex_unlock(&jit_lock);
  return rc;
}

/* Symbol name: the kernel name reduced to [A-Za-z0-9_], then "_<id>". */
static void symbol_name(char *out, size_t n, const char *kname, unsigned long long id) {
  char base[sizeof ((kir_kernel *)0)->name];
  size_t j = 0;
  for (size_t i = 0; kname[i] && j + 1 < sizeof base; i++) {
    char ch = kname[i];
    bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
    base[j++] = ok ? ch : '_';
  }
  base[j] = 0;
  snprintf(out, n, "kiln_%s_%llu", base, id);
}

/* Verifies and optimises mod (default<O2> for the host machine tm). */
static int optimise(LLVMModuleRef mod, LLVMTargetMachineRef tm, const char *kname, char *err, size_t errlen) {
  char *msg = NULL;
  if (LLVMVerifyModule(mod, LLVMReturnStatusAction, &msg)) {
    int rc = set_err(err, errlen, kname, "invalid LLVM IR: ", msg);
    LLVMDisposeMessage(msg);
    return rc;
  }
  LLVMDisposeMessage(msg);
  LLVMPassBuilderOptionsRef opts = LLVMCreatePassBuilderOptions();
  LLVMErrorRef e = LLVMRunPasses(mod, "default<O2>", tm, opts);
  LLVMDisposePassBuilderOptions(opts);
  return e ? set_llvm_err(err, errlen, kname, "running passes: ", e) : KILN_OK;
}

/* Machine code for the optimised mod: an object file (or assembly text:
 * `type`) in *obj. */
static int emit_object(LLVMModuleRef mod, LLVMTargetMachineRef tm, LLVMCodeGenFileType type, const char *kname,
                       LLVMMemoryBufferRef *obj, char *err, size_t errlen) {
  char *msg = NULL;
  if (!LLVMTargetMachineEmitToMemoryBuffer(tm, mod, type, &msg, obj)) return KILN_OK;
  int rc = set_err(err, errlen, kname, "code generation: ", msg ? msg : "failed");
  LLVMDisposeMessage(msg);
  return rc;
}

static void prefer_vector_width(LLVMModuleRef mod, LLVMContextRef ctx) {
  if (!llvm_wide_vectors()) return;
  static const char key[] = "prefer-vector-width", value[] = "512";
  for (LLVMValueRef f = LLVMGetFirstFunction(mod); f; f = LLVMGetNextFunction(f))
    if (!LLVMIsDeclaration(f))
      LLVMAddAttributeAtIndex(f, LLVMAttributeFunctionIndex,
                              LLVMCreateStringAttribute(ctx, key, sizeof key - 1, value, sizeof value - 1));
}

/* What one compile's diagnostic handler saw: the first error's text. */
typedef struct diag_state {
  bool error;
  char msg[192];
} diag_state;

/* LLVMContext diagnostic handler: keeps the first error, drops the rest. */
static void diagnose(LLVMDiagnosticInfoRef di, void *ctx) {
  diag_state *d = ctx;
  if (LLVMGetDiagInfoSeverity(di) != LLVMDSError || d->error) return;
  char *m = LLVMGetDiagInfoDescription(di);
  snprintf(d->msg, sizeof d->msg, "%s", m ? m : "error");
  LLVMDisposeMessage(m);
  d->error = true;
}

/* The fill of a kernel's module: its kernel IR lowered (llvm_lower.c). */
static bool fill_kernel(LLVMModuleRef mod, const char *sym, void *k, char *err, size_t errlen) {
  return llvm_lower_kernel(k, mod, sym, err, errlen) != NULL;
}

/* Builds (fill), optimises and compiles a module named `name` (messages)
 * defining `sym` to an object file (or assembly text: `type`) in a fresh
 * context (no lock: modules compile in parallel). */
static int build_object(const char *name, llvm_module_fill fill, void *fill_ctx, const char *sym,
                        LLVMCodeGenFileType type, LLVMMemoryBufferRef *obj, char **ir_text, char *err,
                        size_t errlen) {
  char lerr[256] = "";
  diag_state diag = {0};
  LLVMContextRef ctx = LLVMContextCreate();
  LLVMContextSetDiagnosticHandler(ctx, diagnose, &diag);
  LLVMModuleRef mod = LLVMModuleCreateWithNameInContext(sym, ctx);
  LLVMTargetMachineRef tm = kernel_machine();
  LLVMSetTarget(mod, g.t->triple);
  LLVMSetDataLayout(mod, g.layout);
  int rc = tm ? KILN_OK : set_err(err, errlen, name, "cannot create a target machine", NULL);
  if (rc == KILN_OK && !fill(mod, sym, fill_ctx, lerr, sizeof lerr)) rc = set_err(err, errlen, name, lerr, NULL);
  if (rc == KILN_OK) prefer_vector_width(mod, ctx);
  if (rc == KILN_OK) rc = optimise(mod, tm, name, err, errlen);
  if (rc == KILN_OK) llvm_stream_mark(mod);
  if (rc == KILN_OK && ir_text) {
    char *s = LLVMPrintModuleToString(mod);
    *ir_text = dup_str(s);
    LLVMDisposeMessage(s);
    if (!*ir_text) {
      set_err(err, errlen, name, "out of memory", NULL);
      rc = KILN_ERR_OOM;
    }
  }
  if (rc == KILN_OK) rc = emit_object(mod, tm, type, name, obj, err, errlen);
  if (rc == KILN_OK && diag.error) {
    rc = set_err(err, errlen, name, "LLVM: ", diag.msg);
    LLVMDisposeMemoryBuffer(*obj);
    *obj = NULL;
  }
  if (tm) LLVMDisposeTargetMachine(tm);
  LLVMDisposeModule(mod);
  LLVMContextDispose(ctx);
  return rc;
}

/* Under jit_lock: the address of sym if it is already linked, else 0
 * (a content-addressed symbol of the disk cache, linked by an earlier
 * load or compile of the same code in this process). */
static LLVMOrcExecutorAddress linked_address(const char *sym) {
  LLVMOrcExecutorAddress addr = 0;
  LLVMErrorRef e = LLVMOrcLLJITLookup(g.jit, &addr, sym);
  if (e) LLVMConsumeError(e);
  return e ? 0 : addr;
}

/* Under jit_lock: links the object into the JIT and looks its symbol up.
 * A failed kernel's resources are removed again. `fixed` symbols (the
 * disk cache's) may be linked already: then that code is used and obj
 * dropped. `count` says whether this was a compile (llvm_compile_count). */
static int add_and_lookup(LLVMMemoryBufferRef obj, const char *sym, bool fixed, bool count, const char *kname,
                          llvm_kernel_fn *out, char *err, size_t errlen) {
  int rc = KILN_OK;
  pthread_mutex_lock(&jit_lock);
  if (!g.jit) { /* llvm_shutdown raced with this compile: a caller bug */
    pthread_mutex_unlock(&jit_lock);
    LLVMDisposeMemoryBuffer(obj);
    return set_err(err, errlen, kname, "llvm_shutdown ran during llvm_compile", NULL);
  }
  g.session_err[0] = 0;
  LLVMOrcExecutorAddress addr = fixed ? linked_address(sym) : 0;
  if (addr) {
    LLVMDisposeMemoryBuffer(obj);
    void *p = (void *)(uintptr_t)addr;
    memcpy(out, &p, sizeof *out);
    pthread_mutex_unlock(&jit_lock);
    return KILN_OK;
  }
  LLVMOrcResourceTrackerRef rt = LLVMOrcJITDylibCreateResourceTracker(LLVMOrcLLJITGetMainJITDylib(g.jit));
  LLVMErrorRef e = LLVMOrcLLJITAddObjectFileWithRT(g.jit, rt, obj); /* takes obj */
  if (!e && graph_fault_hit(GRAPH_FAULT_JIT)) e = LLVMCreateStringError("lookup failed (KILN_FAULT_ALLOC: injected)");
  if (!e) e = LLVMOrcLLJITLookup(g.jit, &addr, sym);
  if (e) {
    rc = set_llvm_err(err, errlen, kname, "JIT: ", e);
    size_t n = err ? strlen(err) : 0;
    if (g.session_err[0] && n + 1 < errlen) snprintf(err + n, errlen - n, " (%s)", g.session_err);
    LLVMConsumeError(LLVMOrcResourceTrackerRemove(rt));
  } else if (!addr) {
    rc = set_err(err, errlen, kname, "JIT returned a null address", NULL);
  } else {
    /* ISO C forbids object→function pointer casts; go through memcpy. */
    void *p = (void *)(uintptr_t)addr;
    memcpy(out, &p, sizeof *out);
    g.compiled += count;
  }
  LLVMOrcReleaseResourceTracker(rt);
  pthread_mutex_unlock(&jit_lock);
  return rc;
}

/* A malloc'ed copy of obj's bytes into *bytes, *len (the disk cache's). */
static int copy_object(LLVMMemoryBufferRef obj, const char *kname, void **bytes, size_t *len, char *err,
                       size_t errlen) {
  *len = LLVMGetBufferSize(obj);
  *bytes = malloc(*len ? *len : 1);
  if (!*bytes) {
    set_err(err, errlen, kname, "out of memory", NULL);
    return KILN_ERR_OOM;
  }
  memcpy(*bytes, LLVMGetBufferStart(obj), *len);
  return KILN_OK;
}

/* kir_verify's verdict on k as a status, message in err. */
static int verify_kernel(const kir_kernel *k, char *err, size_t errlen) {
  const char *why = kir_verify(k);
  if (why == kir_verify_oom) {
    set_err(err, errlen, k->name, "out of memory verifying the kernel", NULL);
    return KILN_ERR_OOM;
  }
  return why ? set_err(err, errlen, k->name, "invalid kernel: ", why) : KILN_OK;
}

int llvm_compile_object(const kir_kernel *k, const char *sym, llvm_kernel_fn *out, char **ir_text, void **obj_bytes,
                        size_t *obj_len, char *err, size_t errlen) {
  if (!k || !out) return set_err(err, errlen, "?", "NULL kernel or output", NULL);
  unsigned long long id = 0;
  int rc = verify_kernel(k, err, errlen);
  if (rc == KILN_OK) rc = acquire_id(&id, err, errlen, k->name);
  if (rc != KILN_OK) return rc;
  char own[sizeof k->name + 32];
  if (!sym) symbol_name(own, sizeof own, k->name, id);
  char *ir = NULL;
  LLVMMemoryBufferRef obj = NULL;
  rc = build_object(k->name, fill_kernel, (void *)k, sym ? sym : own, LLVMObjectFile, &obj, ir_text ? &ir : NULL, err,
                    errlen);
  if (rc == KILN_OK && obj_bytes) {
    rc = copy_object(obj, k->name, obj_bytes, obj_len, err, errlen);
    if (rc != KILN_OK) LLVMDisposeMemoryBuffer(obj);
  }
  if (rc == KILN_OK) rc = add_and_lookup(obj, sym ? sym : own, sym != NULL, true, k->name, out, err, errlen);
  if (rc != KILN_OK && obj_bytes) {
    free(*obj_bytes);
    *obj_bytes = NULL;
  }
  if (rc == KILN_OK && ir_text) *ir_text = ir;
  else free(ir);
  return rc;
}

int llvm_compile(const kir_kernel *k, llvm_kernel_fn *out, char **ir_text, char *err, size_t errlen) {
  return llvm_compile_object(k, NULL, out, ir_text, NULL, NULL, err, errlen);
}

int llvm_compile_asm(const kir_kernel *k, char **asm_text, char *err, size_t errlen) {
  if (!k || !asm_text) return set_err(err, errlen, "?", "NULL kernel or output", NULL);
  unsigned long long id = 0;
  int rc = verify_kernel(k, err, errlen);
  if (rc == KILN_OK) rc = acquire_id(&id, err, errlen, k->name);
  if (rc != KILN_OK) return rc;
  char sym[sizeof k->name + 32];
  symbol_name(sym, sizeof sym, k->name, id);
  LLVMMemoryBufferRef buf = NULL;
  rc = build_object(k->name, fill_kernel, (void *)k, sym, LLVMAssemblyFile, &buf, NULL, err, errlen);
  if (rc != KILN_OK) return rc;
  size_t n = LLVMGetBufferSize(buf);
  *asm_text = malloc(n + 1);
  if (*asm_text) {
    memcpy(*asm_text, LLVMGetBufferStart(buf), n);
    (*asm_text)[n] = 0;
  } else {
    rc = KILN_ERR_OOM;
    set_err(err, errlen, k->name, "out of memory", NULL);
  }
  LLVMDisposeMemoryBuffer(buf);
  return rc;
}

int llvm_compile_module(const char *name, llvm_module_fill fill, void *fill_ctx, const char *sym, void **out,
                        void **obj_bytes, size_t *obj_len, char *err, size_t errlen) {
  unsigned long long id = 0;
  int rc = acquire_id(&id, err, errlen, name);
  if (rc != KILN_OK) return rc;
  char own[160];
  if (!sym) symbol_name(own, sizeof own, name, id);
  LLVMMemoryBufferRef obj = NULL;
  rc = build_object(name, fill, fill_ctx, sym ? sym : own, LLVMObjectFile, &obj, NULL, err, errlen);
  if (rc == KILN_OK && obj_bytes) {
    rc = copy_object(obj, name, obj_bytes, obj_len, err, errlen);
    if (rc != KILN_OK) LLVMDisposeMemoryBuffer(obj);
  }
  llvm_kernel_fn fn = NULL;
  if (rc == KILN_OK) rc = add_and_lookup(obj, sym ? sym : own, sym != NULL, true, name, &fn, err, errlen);
  if (rc == KILN_OK) memcpy(out, &fn, sizeof fn); /* the caller casts back to its function type */
  else if (obj_bytes && *obj_bytes) {
    free(*obj_bytes);
    *obj_bytes = NULL;
  }
  return rc;
}

int llvm_load_object(const void *obj_bytes, size_t obj_len, const char *sym, llvm_kernel_fn *out, char *err,
                     size_t errlen) {
  unsigned long long id = 0;
  int rc = acquire_id(&id, err, errlen, sym);
  if (rc != KILN_OK) return rc;
  LLVMMemoryBufferRef obj = LLVMCreateMemoryBufferWithMemoryRangeCopy(obj_bytes, obj_len, sym);
  if (!obj) return set_err(err, errlen, sym, "out of memory", NULL);
  return add_and_lookup(obj, sym, true, false, sym, out, err, errlen);
}

/* "<triple> <cpu> <features> llvm-<M.m.p> vec<bits>": what the code of a
 * compile depends on besides the kernel IR — the target's CPU and
 * features (a pinned KILN_CPU's name with no features: the ones it
 * implies; never the host's, so code built for another CPU is never
 * loaded). KILN_CACHE_TEST_CPU replaces the CPU name and features
 * (tests: a "different machine"). */
char *llvm_target_id(void) {
  unsigned long long id; /* the JIT first: an unusable target fails here */
  if (acquire_id(&id, NULL, 0, "target id") != KILN_OK) return NULL;
  const llvm_target_info *t = llvm_target();
  const char *test_cpu = getenv("KILN_CACHE_TEST_CPU");
  unsigned major = 0, minor = 0, patch = 0;
  LLVMGetVersion(&major, &minor, &patch);
  size_t n = strlen(t->triple) + strlen(t->cpu) + strlen(t->features) + (test_cpu ? strlen(test_cpu) : 0) + 96;
  char *out = malloc(n);
  if (out)
    snprintf(out, n, "%s %s %s llvm-%u.%u.%u vec%d", t->triple, test_cpu ? test_cpu : t->cpu,
             test_cpu ? "" : t->features, major, minor, patch, llvm_wide_vectors() ? 512 : 0);
  return out;
}

unsigned long long llvm_compile_count(void) {
  pthread_mutex_lock(&jit_lock);
  unsigned long long n = g.compiled;
  pthread_mutex_unlock(&jit_lock);
  return n;
}

void llvm_shutdown(void) {
  llvm_gemm_forget(); /* its kernels go with the JIT */
  pthread_mutex_lock(&jit_lock);
  dispose_jit();
  pthread_mutex_unlock(&jit_lock);
}
