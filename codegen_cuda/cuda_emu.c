/*
 * cuda_emu.c — the "cuda-emu" backend mode: runs the CUDA backend's code
 * on the CPU. Each kernel is printed as CUDA C (cuda_print.c), checked by
 * the CUDA toolchain (cuda_check_kernel: NVRTC → CUBIN for sm_80, NVRTC →
 * PTX for compute_90 assembled by ptxas for sm_90; any failure is an
 * error), and then the SAME source is compiled for the host by the system
 * C++ compiler ($KILN_CXX, else `c++` or `g++` on PATH) after a small
 * emulation header (emu_header below): __global__/__device__ are empty,
 * blockIdx/threadIdx/blockDim/gridDim are the current CUDA thread's
 * coordinates (thread-local, restored after every switch), __shared__ is
 * static thread_local (a block runs alone on its OS thread),
 * __syncthreads() and the warp shuffles call the launcher
 * (runtime/cuda_emu_run.c), the bit-cast intrinsics are memcpy, float4 / int4
 * are 16-byte aligned structs, math comes from <cmath>.
 *
 * The shared object (-O2 -fPIC -shared) is dlopen'ed; its `kiln_emu_api`
 * is pointed at the launcher the caller passed (the runtime's), and its
 * entry point
 *    extern "C" void kiln_emu_entry(void *const *bufs, long long start, long
 * long end) has the CPU backend's calling convention, so the runtime runs it on
 * its thread pool like an LLVM kernel: every chunk [start, end) is one
 * launch in the kernel's launch shape (cuda_kernel_launch_rule, whose
 * fields are printed into the entry), cooperative blocks as fibers.
 * Kernels using F16/BF16 are checked by NVRTC/ptxas but run on the LLVM
 * path (the header has no half types): *fn is NULL for them.
 *
 * Temporary files live in one private mkdtemp directory, removed at exit;
 * each source and object is unlinked as soon as it is loaded. Compiles run
 * in parallel (no lock is held while a compiler runs); counters are
 * guarded by a mutex.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cuda_backend.h"

extern char **environ;

/* Prepended to every printed kernel for the host compiler. */
static const char emu_header[] =
    "/* cuda_emu.h: the CUDA C that Kiln's printer emits, on the host */\n"
    "#include <cmath>\n"
    "#include <cstring>\n"
    "#include <cstdint>\n"
    "using namespace std;\n"
    "#define __global__\n"
    "#define __device__\n"
    "#define __host__\n"
    "#define __forceinline__ inline\n"
    "#define __launch_bounds__(...)\n"
    "#define __restrict__ __restrict\n"
    "#define __shared__ static thread_local /* a block runs alone on its OS thread */\n"
    "struct dim3 { unsigned x, y, z; };\n"
    "/* this CUDA thread's coordinates: set when it starts, restored after a switch */\n"
    "struct kiln_emu_ids { dim3 b, t, bd, gd; };\n"
    "static thread_local kiln_emu_ids kiln_emu_id = {{0, 0, 0}, {0, 0, 0}, {1, 1, 1}, {1, 1, 1}};\n"
    "#define blockIdx (kiln_emu_id.b)\n"
    "#define threadIdx (kiln_emu_id.t)\n"
    "#define blockDim (kiln_emu_id.bd)\n"
    "#define gridDim (kiln_emu_id.gd)\n"
    "/* the launcher in libkiln (runtime/cuda_emu_run.c), set after dlopen */\n"
    "typedef void (*kiln_emu_thread_fn)(void *, unsigned, unsigned, unsigned, unsigned);\n"
    "struct kiln_emu_api_t {\n"
    "  void (*launch)(int, long long, unsigned, long long, long long, kiln_emu_thread_fn, void *);\n"
    "  void (*sync)(void);\n"
    "  unsigned long long (*shfl)(unsigned, unsigned long long, unsigned);\n"
    "};\n"
    "extern \"C\" __attribute__((visibility(\"default\"))) const kiln_emu_api_t *kiln_emu_api;\n"
    "const kiln_emu_api_t *kiln_emu_api = 0;\n"
    "static inline void __syncthreads() {\n"
    "  const kiln_emu_ids me = kiln_emu_id;\n"
    "  kiln_emu_api->sync();\n"
    "  kiln_emu_id = me;\n"
    "}\n"
    "template <class T> static inline T kiln_emu_shfl(unsigned mask, T v, unsigned src) {\n"
    "  unsigned long long bits = 0;\n"
    "  memcpy(&bits, &v, sizeof v);\n"
    "  const kiln_emu_ids me = kiln_emu_id;\n"
    "  bits = kiln_emu_api->shfl(mask, bits, src);\n"
    "  kiln_emu_id = me;\n"
    "  memcpy(&v, &bits, sizeof v);\n"
    "  return v;\n"
    "}\n"
    "template <class T> static inline T __shfl_down_sync(unsigned mask, T v, unsigned d) {\n"
    "  const unsigned lane = threadIdx.x & 31u;\n"
    "  return kiln_emu_shfl(mask, v, lane + d < 32u ? lane + d : lane);\n"
    "}\n"
    "template <class T> static inline T __shfl_xor_sync(unsigned mask, T v, int m) {\n"
    "  return kiln_emu_shfl(mask, v, (threadIdx.x ^ (unsigned)m) & 31u);\n"
    "}\n"
    "template <class T> static inline T __shfl_sync(unsigned mask, T v, int src) {\n"
    "  return kiln_emu_shfl(mask, v, (unsigned)src & 31u);\n"
    "}\n"
    "template <class To, class From> static inline To kiln_emu_bits(From f) {\n"
    "  To t;\n"
    "  memcpy(&t, &f, sizeof t);\n"
    "  return t;\n"
    "}\n"
    "static inline float __int_as_float(int x) { return kiln_emu_bits<float>(x); }\n"
    "static inline int __float_as_int(float x) { return kiln_emu_bits<int>(x); }\n"
    "static inline double __longlong_as_double(long long x) { return kiln_emu_bits<double>(x); }\n"
    "static inline long long __double_as_longlong(double x) { return kiln_emu_bits<long long>(x); }\n"
    "/* CUDA's vector types (16-byte aligned, as on the device) */\n"
    "struct alignas(16) float4 { float x, y, z, w; };\n"
    "struct alignas(16) int4 { int x, y, z, w; };\n"
    "static inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }\n"
    "static inline int4 make_int4(int x, int y, int z, int w) { return {x, y, z, w}; }\n"
    "/* a kernel argument from the runtime's untyped buffer array */\n"
    "struct kiln_emu_ptr {\n"
    "  void *p;\n"
    "  template <class T> operator T *() const { return (T *)p; }\n"
    "};\n"
    "/* the launch's arguments, shared by its threads */\n"
    "struct kiln_emu_args {\n"
    "  void *const *bufs;\n"
    "  long long start, end;\n"
    "};\n"
    "#line 1 \"kernel.cu\"\n";

static pthread_mutex_t emu_lock = PTHREAD_MUTEX_INITIALIZER;
static char tmp_dir[512]; /* "" until created */
static long long n_files;
static cuda_emu_stats stats;

static void remove_dir(void) {
  if (tmp_dir[0]) rmdir(tmp_dir); /* files are unlinked as they are loaded */
}

static void print_summary(void) {
  cuda_emu_stats s;
  cuda_emu_get_stats(&s);
  if (s.kernels)
    fprintf(stderr,
            "kiln: cuda-emu: %lld kernels, %lld toolchain checks (NVRTC sm_80, "
            "NVRTC compute_90 + ptxas sm_90), "
            "%lld failed; %lld compiled for the host, %lld F16/BF16 kernels "
            "run on LLVM; %lld cooperative\n",
            (long long)s.kernels, (long long)s.checks, (long long)s.failures, (long long)s.host_compiles,
            (long long)s.half_fallbacks, (long long)s.cooperative);
}

void cuda_emu_get_stats(cuda_emu_stats *out) {
  pthread_mutex_lock(&emu_lock);
  *out = stats;
  pthread_mutex_unlock(&emu_lock);
}

/* The host C++ compiler: $KILN_CXX, else c++ or g++ found on PATH; NULL
 * when none is found. The returned string is static. */
static const char *host_cxx(void) {
  static char found[1024];
  const char *env = getenv("KILN_CXX");
  if (env && *env) return strchr(env, '/') && access(env, X_OK) != 0 ? NULL : env;
  const char *path = getenv("PATH");
  if (!path || !*path) path = "/usr/local/bin:/usr/bin:/bin";
  static const char *const names[] = {"c++", "g++"};
  for (int n = 0; n < 2; n++) {
    for (const char *p = path; *p;) {
      const char *colon = strchr(p, ':');
      size_t len = colon ? (size_t)(colon - p) : strlen(p);
      snprintf(found, sizeof found, "%.*s/%s", (int)len, len ? p : ".", names[n]);
      if (access(found, X_OK) == 0) return found;
      p += len + (colon != NULL);
    }
  }
  return NULL;
}

bool cuda_emu_available(char *err, size_t errlen) {
  char why[1024];
  if (!cuda_nvrtc_available(why, sizeof why)) {
    if (err) snprintf(err, errlen, "cuda-emu needs NVRTC to check kernels: %s", why);
    return false;
  }
  if (!host_cxx()) {
    if (err)
      snprintf(err, errlen,
               "cuda-emu needs a host C++ compiler: no c++ or g++ on PATH (or "
               "set KILN_CXX)");
    return false;
  }
  return true;
}

/* Under emu_lock: the private directory (created on first use), or NULL. */
static const char *dir_locked(void) {
  if (tmp_dir[0]) return tmp_dir;
  const char *base = getenv("TMPDIR");
  snprintf(tmp_dir, sizeof tmp_dir, "%s/kiln_emu_XXXXXX", base && *base ? base : "/tmp");
  if (!mkdtemp(tmp_dir)) {
    tmp_dir[0] = 0;
    return NULL;
  }
  atexit(remove_dir);
  atexit(print_summary);
  return tmp_dir;
}

/* Runs argv with stdout and stderr into log_path; the exit status (-1
 * when it cannot run). */
static int run(char *const *argv, const char *log_path) {
  posix_spawn_file_actions_t fa;
  if (posix_spawn_file_actions_init(&fa) != 0) return -1;
  posix_spawn_file_actions_addopen(&fa, 1, log_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid;
  int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return -1;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void read_log(const char *path, char *buf, size_t len) {
  buf[0] = 0;
  FILE *f = fopen(path, "r");
  if (!f) return;
  size_t n = fread(buf, 1, len - 1, f);
  buf[n] = 0;
  fclose(f);
}

/* Compiles the printed source src (kernel kiln_emu_kernel with n_params
 * pointers) for the host and loads it; name for messages. */
static int host_compile(const char *name, int n_params, const cuda_launch_rule *rule, const char *src,
                        const cuda_emu_api *launcher, cuda_emu_fn *fn, char *err, size_t errlen) {
  const char *cxx = host_cxx();
  if (!cxx) {
    snprintf(err, errlen, "cuda-emu: %s: no host C++ compiler (c++ or g++ on PATH, or KILN_CXX)", name);
    return KILN_ERR_UNSUPPORTED;
  }
  pthread_mutex_lock(&emu_lock);
  const char *dir = dir_locked();
  long long id = n_files++;
  pthread_mutex_unlock(&emu_lock);
  if (!dir) {
    snprintf(err, errlen, "cuda-emu: cannot create a temporary directory: %s", strerror(errno));
    return KILN_ERR_IO;
  }
  char cu[600], so[600], log[600];
  snprintf(cu, sizeof cu, "%s/k%lld.cpp", dir, id);
  snprintf(so, sizeof so, "%s/k%lld.so", dir, id);
  snprintf(log, sizeof log, "%s/k%lld.log", dir, id);
  FILE *f = fopen(cu, "w");
  if (!f) {
    snprintf(err, errlen, "cuda-emu: cannot write %s: %s", cu, strerror(errno));
    return KILN_ERR_IO;
  }
  fputs(emu_header, f);
  fputs(src, f);
  /* one CUDA thread, then the launch: the rule's shape over [start, end) */
  fputs("\nstatic void kiln_emu_thread(void *ctx, unsigned b, unsigned t, unsigned grid, unsigned block) {\n"
        "  kiln_emu_id = {{b, 0, 0}, {t, 0, 0}, {block, 1, 1}, {grid, 1, 1}};\n"
        "  const kiln_emu_args *a = (const kiln_emu_args *)ctx;\n"
        "  kiln_emu_kernel(",
        f);
  for (int p = 0; p < n_params; p++) fprintf(f, "kiln_emu_ptr{a->bufs[%d]}, ", p);
  fprintf(f,
          "a->start, a->end);\n}\n"
          "extern \"C\" void kiln_emu_entry(void *const *bufs, long long start, long long end) {\n"
          "  kiln_emu_args a = {bufs, start, end};\n"
          "  kiln_emu_api->launch(%d, %lldLL, %uu, start, end, kiln_emu_thread, &a);\n}\n",
          (int)rule->kind, (long long)rule->extent, rule->block);
  bool ok = fclose(f) == 0;
  /* -fno-strict-aliasing: the vector form reads float buffers through float4 pointers */
  char *argv[] = {(char *)cxx, "-std=c++17", "-O2", "-fPIC", "-shared", "-ffp-contract=off", "-fno-strict-aliasing",
                  "-w", "-o", so, cu, NULL};
  int rc = ok ? run(argv, log) : -1;
  int st = KILN_OK;
  if (rc != 0) {
    char text[2048];
    read_log(log, text, sizeof text);
    snprintf(err, errlen, "cuda-emu: %s failed on %s (exit %d):\n%s", cxx, name, rc, text);
    st = rc == -1 || rc == 127 ? KILN_ERR_UNSUPPORTED : KILN_ERR_COMPILE;
  } else {
    void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    void *sym = h ? dlsym(h, "kiln_emu_entry") : NULL;
    const cuda_emu_api **api = h ? (const cuda_emu_api **)dlsym(h, "kiln_emu_api") : NULL;
    if (!sym || !api) {
      snprintf(err, errlen, "cuda-emu: cannot load the host build of %s: %s", name, dlerror());
      st = KILN_ERR_COMPILE;
    } else {
      *api = launcher;
      *fn = (cuda_emu_fn)sym; /* the object stays mapped for the process's life */
    }
  }
  unlink(cu);
  unlink(so);
  unlink(log);
  return st;
}

static bool uses_half(const kir_kernel *k) {
  for (int p = 0; p < k->n_params; p++)
    if (kir_is_half(k->param_type[p])) return true;
  for (int i = 0; i < k->n_uops; i++) {
    const kir_uop *u = &k->uops[i];
    if (kir_is_half(u->type)) return true;
    if (u->op == KIR_PARAM && kir_is_half(u->elem)) return true;
  }
  return false;
}

/* The toolchain checks of src (NVRTC sm_80; NVRTC compute_90 + ptxas
 * sm_90), counted in the stats; name for messages. */
static int check_archs(const char *src, const char *name, char *err, size_t errlen) {
  static const char *const archs[] = {"sm_80", "compute_90"};
  char why[1024];
  if (!cuda_nvrtc_available(why, sizeof why)) {
    snprintf(err, errlen, "cuda-emu: %s: NVRTC not available: %s", name, why);
    return KILN_ERR_DEVICE;
  }
  for (int a = 0; a < 2; a++) {
    int st = cuda_check_source(src, name, archs[a], err, errlen);
    pthread_mutex_lock(&emu_lock);
    stats.checks++;
    if (st != KILN_OK) stats.failures++;
    pthread_mutex_unlock(&emu_lock);
    if (st != KILN_OK) return st == KILN_ERR_DEVICE || st == KILN_ERR_IO ? st : KILN_ERR_COMPILE;
  }
  return KILN_OK;
}

/* Counts a checked kernel: built for the host with st (unless half: left
 * to LLVM), cooperative under its rule. */
static void count_build(int st, bool half, const cuda_launch_rule *rule) {
  bool coop = rule->kind == CUDA_LAUNCH_BLOCK_PER_INDEX || rule->kind == CUDA_LAUNCH_ONE_BLOCK;
  pthread_mutex_lock(&emu_lock);
  stats.kernels++;
  if (half)
    stats.half_fallbacks++;
  else if (st == KILN_OK)
    stats.host_compiles++;
  stats.cooperative += !half && st == KILN_OK && coop;
  if (!tmp_dir[0]) dir_locked(); /* registers the exit summary */
  pthread_mutex_unlock(&emu_lock);
}

/* Checks src and builds it for the host, counted. */
static int check_and_build(const char *name, const char *src, int n_params, bool half, const cuda_launch_rule *rule,
                           const cuda_emu_api *launcher, cuda_emu_fn *fn, char *err, size_t errlen) {
  *fn = NULL;
  int st = check_archs(src, name, err, errlen);
  if (st != KILN_OK) return st;
  if (!half) st = host_compile(name, n_params, rule, src, launcher, fn, err, errlen);
  count_build(st, half, rule);
  return st;
}

int cuda_emu_compile(const kir_kernel *k, const cuda_emu_api *launcher, cuda_emu_fn *fn, char *err, size_t errlen) {
  *fn = NULL;
  /* the text the toolchain checks is the text the host builds */
  char *src = NULL;
  cuda_launch_rule rule = {0};
  int st = cuda_print_kernel(k, "kiln_emu_kernel", &src, err, errlen);
  if (st == KILN_OK && cuda_kernel_launch_rule(k, &rule) != KILN_OK) {
    snprintf(err, errlen, "cuda-emu: out of memory planning the launch of %s", k->name);
    st = KILN_ERR_OOM;
  }
  if (st == KILN_OK) st = check_and_build(k->name, src, k->n_params, uses_half(k), &rule, launcher, fn, err, errlen);
  free(src);
  return st;
}

int cuda_emu_compile_source(const char *name, const char *src, int n_params, const cuda_launch_rule *rule,
                            const cuda_emu_api *launcher, cuda_emu_fn *fn, char *err, size_t errlen) {
  return check_and_build(name, src, n_params, false, rule, launcher, fn, err, errlen);
}
