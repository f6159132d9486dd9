/*
 * cuda_nvrtc.c — NVRTC (CUDA's run-time compiler) loaded with dlopen, so
 * Kiln neither links against CUDA nor needs a toolkit to build or run.
 *
 * Loading: the first call tries the versioned sonames libnvrtc.so.13 and
 * libnvrtc.so.12, then libnvrtc.so, each first through the dynamic
 * linker's search path and then under the toolkit's usual library folders
 * (/usr/local/cuda/lib64, /usr/local/cuda/targets/x86_64-linux/lib).
 * $KILN_NVRTC_LIB, when set, is the only library tried (a path or a
 * name), so a user can pick one toolkit among several — or none. The result — the handle and
 * the entry points, or why nothing loaded — is kept until
 * cuda_nvrtc_shutdown or a test's cuda_nvrtc_set_search_list.
 *
 * The function types below are written from NVIDIA's documented NVRTC C
 * API (nvrtcResult is an int enum, NVRTC_SUCCESS = 0; nvrtcProgram an
 * opaque pointer). The loader's state is guarded by a mutex, and compiles
 * are serialized by another (older NVRTC releases do not promise that
 * concurrent compiles are safe; the lock costs little next to a compile).
 *
 * Target: cuda_nvrtc_target picks sm_XX when nvrtcGetSupportedArchs
 * lists the device's architecture, else the highest compute_YY below it
 * (PTX the driver JIT-compiles); those two entry points are optional.
 *
 * Include path: NVRTC (13.0 included) has no built-in cuda_fp16.h or
 * cuda_bf16.h, which kernels using F16/BF16 include. When the library was
 * loaded from a toolkit, that toolkit's include folder is passed
 * (-I<lib>/../include); else /usr/local/cuda/include when it exists.
 * Kernels without F16/BF16 need no header at all.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_dl.h"
#include "cuda_backend.h"

typedef int nvrtc_result;
typedef struct nvrtc_program_s *nvrtc_program;

typedef struct nvrtc_api {
  const char *(*get_error_string)(nvrtc_result);
  nvrtc_result (*version)(int *, int *);
  nvrtc_result (*create_program)(nvrtc_program *, const char *, const char *, int, const char *const *,
                                 const char *const *);
  nvrtc_result (*destroy_program)(nvrtc_program *);
  nvrtc_result (*compile_program)(nvrtc_program, int, const char *const *);
  nvrtc_result (*get_log_size)(nvrtc_program, size_t *);
  nvrtc_result (*get_log)(nvrtc_program, char *);
  nvrtc_result (*get_ptx_size)(nvrtc_program, size_t *);
  nvrtc_result (*get_ptx)(nvrtc_program, char *);
  nvrtc_result (*get_cubin_size)(nvrtc_program, size_t *);
  nvrtc_result (*get_cubin)(nvrtc_program, char *);
  /* optional (NVRTC 11.2+): NULL when the library lacks them */
  nvrtc_result (*num_supported_archs)(int *);
  nvrtc_result (*supported_archs)(int *);
} nvrtc_api;

static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t compile_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
  bool tried, ok;
  void *handle;
  nvrtc_api api;
  char include_opt[512]; /* "-I<toolkit>/include" or "" */
  char why[1024];        /* why loading failed */
} g;

static const char *const default_names[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so", NULL};
static const char *const toolkit_dirs[] = {"/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib", NULL};
static const char *const *search_list = default_names;

/* Resolves every entry point; false (with g.why) if one is missing. */
static bool resolve(void *h, const char *lib) {
  static const cuda_dl_sym syms[] = {
      {"nvrtcGetErrorString", offsetof(nvrtc_api, get_error_string)},
      {"nvrtcVersion", offsetof(nvrtc_api, version)},
      {"nvrtcCreateProgram", offsetof(nvrtc_api, create_program)},
      {"nvrtcDestroyProgram", offsetof(nvrtc_api, destroy_program)},
      {"nvrtcCompileProgram", offsetof(nvrtc_api, compile_program)},
      {"nvrtcGetProgramLogSize", offsetof(nvrtc_api, get_log_size)},
      {"nvrtcGetProgramLog", offsetof(nvrtc_api, get_log)},
      {"nvrtcGetPTXSize", offsetof(nvrtc_api, get_ptx_size)},
      {"nvrtcGetPTX", offsetof(nvrtc_api, get_ptx)},
      {"nvrtcGetCUBINSize", offsetof(nvrtc_api, get_cubin_size)},
      {"nvrtcGetCUBIN", offsetof(nvrtc_api, get_cubin)},
  };
  static const cuda_dl_sym arch_syms[] = {
      {"nvrtcGetNumSupportedArchs", offsetof(nvrtc_api, num_supported_archs)},
      {"nvrtcGetSupportedArchs", offsetof(nvrtc_api, supported_archs)},
  };
  const char *missing = cuda_dl_resolve(h, syms, sizeof syms / sizeof syms[0], &g.api);
  if (missing) snprintf(g.why, sizeof g.why, "%s has no symbol %s", lib, missing);
  if (!missing && cuda_dl_resolve(h, arch_syms, 2, &g.api)) /* an older NVRTC: no list */
    g.api.num_supported_archs = NULL, g.api.supported_archs = NULL;
  return missing == NULL;
}

/* When the loaded library lives in a toolkit (…/lib64 or
 * …/targets/<triple>/lib, the include folder a sibling of lib*), passes
 * that include folder to compiles. */
static void set_include(void) {
  Dl_info info;
  void *sym;
  memcpy(&sym, &g.api.version, sizeof sym);
  if (!dladdr(sym, &info) || !info.dli_fname) return;
  char dir[400];
  snprintf(dir, sizeof dir, "%s", info.dli_fname);
  char *slash = strrchr(dir, '/');
  if (!slash) return;
  *slash = 0;
  char inc[480];
  snprintf(inc, sizeof inc, "%s/../include/cuda_fp16.h", dir);
  FILE *f = fopen(inc, "r");
  if (f) {
    fclose(f);
    snprintf(g.include_opt, sizeof g.include_opt, "-I%s/../include", dir);
  } else if ((f = fopen("/usr/local/cuda/include/cuda_fp16.h", "r"))) {
    fclose(f);
    snprintf(g.include_opt, sizeof g.include_opt, "-I/usr/local/cuda/include");
  }
}

/* Tries one name, bare and under each toolkit folder; appends to tried. */
static void *try_open(const char *name, char *tried, size_t len) {
  size_t used = strlen(tried);
  snprintf(tried + used, len - used, "%s%s", used ? ", " : "", name);
  void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (h || strchr(name, '/')) return h;
  for (int d = 0; toolkit_dirs[d]; d++) {
    char path[400];
    snprintf(path, sizeof path, "%s/%s", toolkit_dirs[d], name);
    h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (h) return h;
  }
  return NULL;
}

/* Under load_lock. */
static void load(void) {
  if (g.tried) return;
  g.tried = true;
  char tried[700] = "";
  const char *env = search_list == default_names ? getenv("KILN_NVRTC_LIB") : NULL;
  const char *only[] = {env, NULL};
  const char *const *names = env && *env ? only : search_list;
  void *h = NULL;
  const char *lib = NULL;
  for (int i = 0; !h && names[i]; i++) h = try_open(lib = names[i], tried, sizeof tried);
  if (!h) {
    const char *dl = dlerror();
    snprintf(g.why, sizeof g.why,
             "could not load libnvrtc (tried %s; install the CUDA toolkit or set KILN_NVRTC_LIB)%s%s", tried,
             dl ? "; last error: " : "", dl ? dl : "");
    return;
  }
  if (!resolve(h, lib)) {
    dlclose(h);
    return;
  }
  g.handle = h;
  g.ok = true;
  set_include();
}

static bool loaded(char *err, size_t errlen) {
  pthread_mutex_lock(&load_lock);
  load();
  bool ok = g.ok;
  if (!ok && err) snprintf(err, errlen, "NVRTC not available: %s", g.why);
  pthread_mutex_unlock(&load_lock);
  return ok;
}

bool cuda_nvrtc_available(char *err, size_t errlen) { return loaded(err, errlen); }

int cuda_nvrtc_version(int *major, int *minor) {
  if (!loaded(NULL, 0)) return KILN_ERR_DEVICE;
  return g.api.version(major, minor) == 0 ? KILN_OK : KILN_ERR_DEVICE;
}

/* Forgets the loaded library without dlclose: NVRTC keeps process-wide
 * C++ state (its statically linked runtime's exception-handling pool, for
 * one) that is reachable only from its own globals. Unmapping it would
 * turn that state into a leak LeakSanitizer reports against an unknown
 * module; kept mapped, the state stays reachable. A later load gets the
 * same mapping back from dlopen. */
static void unload(void) { memset(&g, 0, sizeof g); }

void cuda_nvrtc_set_search_list(const char *const *names) {
  pthread_mutex_lock(&load_lock);
  unload();
  search_list = names ? names : default_names;
  pthread_mutex_unlock(&load_lock);
}

void cuda_nvrtc_shutdown(void) {
  pthread_mutex_lock(&load_lock);
  unload();
  pthread_mutex_unlock(&load_lock);
}

/* Under load_lock: the highest arch NVRTC lists that is <= cc (its
 * number, e.g. 90), or 0 when none is; *exact when cc itself is listed.
 * Without the list (NVRTC before 11.2) cc is taken as known. */
static int best_arch(int cc, bool *exact) {
  int n = 0, best = 0;
  *exact = false;
  if (!g.api.num_supported_archs || g.api.num_supported_archs(&n) != 0 || n <= 0 || n > 4096) {
    *exact = true;
    return cc;
  }
  int *archs = malloc((size_t)n * sizeof *archs);
  if (archs && g.api.supported_archs(archs) == 0)
    for (int i = 0; i < n; i++) {
      if (archs[i] == cc) *exact = true;
      if (archs[i] <= cc && archs[i] > best) best = archs[i];
    }
  else best = cc, *exact = true; /* the list failed: try the exact arch */
  free(archs);
  return *exact ? cc : best;
}

int cuda_nvrtc_target(int cc_major, int cc_minor, char *arch, size_t len, char *err, size_t errlen) {
  if (!loaded(err, errlen)) return KILN_ERR_DEVICE;
  int cc = cc_major * 10 + cc_minor;
  bool exact = false;
  pthread_mutex_lock(&load_lock);
  int best = best_arch(cc, &exact);
  pthread_mutex_unlock(&load_lock);
  if (best <= 0) {
    int major = 0, minor = 0;
    g.api.version(&major, &minor);
    snprintf(err, errlen, "NVRTC %d.%d knows no architecture at or below the device's sm_%d (compute capability %d.%d)",
             major, minor, cc, cc_major, cc_minor);
    return KILN_ERR_UNSUPPORTED;
  }
  snprintf(arch, len, "%s_%d", exact ? "sm" : "compute", best);
  return KILN_OK;
}

/* "sm_80" / "compute_90": digits after the prefix; false if malformed. */
static bool parse_arch(const char *arch, bool *cubin) {
  const char *digits = NULL;
  if (strncmp(arch, "sm_", 3) == 0) digits = arch + 3, *cubin = true;
  else if (strncmp(arch, "compute_", 8) == 0) digits = arch + 8, *cubin = false;
  if (!digits || !*digits) return false;
  for (const char *p = digits; *p; p++)
    if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'z' && p[1] == 0))) return false; /* sm_90a */
  return strlen(arch) < 32;
}

/* The program's log appended to err after `what`. */
static void log_error(nvrtc_program prog, const char *what, char *err, size_t errlen) {
  size_t n = 0;
  char *log = NULL;
  if (g.api.get_log_size(prog, &n) == 0 && n > 0 && (log = malloc(n + 1)) && g.api.get_log(prog, log) == 0) log[n] = 0;
  else if (log) log[0] = 0;
  snprintf(err, errlen, "%s%s%s", what, log && log[0] ? "\n" : "", log ? log : "");
  free(log);
}

static int compile_locked(const char *src, const char *name, const char *arch, bool cubin, char **out, size_t *out_len,
                          char *err, size_t errlen);

int cuda_nvrtc_compile(const char *src, const char *name, const char *arch, char **out, size_t *out_len, char *err,
                       size_t errlen) {
  *out = NULL;
  *out_len = 0;
  bool cubin = false;
  if (!arch || !parse_arch(arch, &cubin)) {
    snprintf(err, errlen, "cuda_nvrtc_compile: arch \"%s\" is neither sm_XX nor compute_XX", arch ? arch : "(null)");
    return KILN_ERR_ARG;
  }
  if (!loaded(err, errlen)) return KILN_ERR_DEVICE;
  pthread_mutex_lock(&compile_lock);
  int st = compile_locked(src, name, arch, cubin, out, out_len, err, errlen);
  pthread_mutex_unlock(&compile_lock);
  return st;
}

/* Under compile_lock: one NVRTC program, created, compiled, read, freed. */
static int compile_locked(const char *src, const char *name, const char *arch, bool cubin, char **out, size_t *out_len,
                          char *err, size_t errlen) {
  nvrtc_program prog = NULL;
  nvrtc_result r = g.api.create_program(&prog, src, name, 0, NULL, NULL);
  if (r != 0) {
    snprintf(err, errlen, "nvrtcCreateProgram(%s): %s", name, g.api.get_error_string(r));
    return r == 1 ? KILN_ERR_OOM : KILN_ERR_COMPILE; /* 1: NVRTC_ERROR_OUT_OF_MEMORY */
  }
  char arch_opt[48];
  snprintf(arch_opt, sizeof arch_opt, "--gpu-architecture=%s", arch);
  const char *opts[4] = {arch_opt, "--std=c++17"};
  int n_opts = 2;
  if (g.include_opt[0]) opts[n_opts++] = g.include_opt;
  r = g.api.compile_program(prog, n_opts, opts);
  int st = KILN_OK;
  if (r != 0) {
    char what[256];
    snprintf(what, sizeof what, "NVRTC could not compile %s for %s (%s); compile log:", name, arch,
             g.api.get_error_string(r));
    log_error(prog, what, err, errlen);
    st = KILN_ERR_COMPILE;
  } else {
    size_t n = 0;
    r = cubin ? g.api.get_cubin_size(prog, &n) : g.api.get_ptx_size(prog, &n);
    char *img = r == 0 ? malloc(n ? n : 1) : NULL;
    if (img) r = cubin ? g.api.get_cubin(prog, img) : g.api.get_ptx(prog, img);
    if (r != 0 || !img) {
      free(img);
      snprintf(err, errlen, "NVRTC: getting the %s of %s failed: %s", cubin ? "CUBIN" : "PTX", name,
               r != 0 ? g.api.get_error_string(r) : "out of memory");
      st = r != 0 ? KILN_ERR_COMPILE : KILN_ERR_OOM;
    } else {
      *out = img;
      *out_len = n;
    }
  }
  g.api.destroy_program(&prog);
  return st;
}
