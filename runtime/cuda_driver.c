/*
 * cuda_driver.c — the CUDA driver API (libcuda) loaded with dlopen, so Kiln
 * neither links against CUDA nor needs a driver to build or run; without
 * one, the CUDA backend reports why it is unavailable.
 *
 * Loading: the first call tries libcuda.so.1 (the name the driver package
 * installs), then libcuda.so, through the dynamic linker's search path.
 * $KILN_CUDA_LIB, when set, is the only library tried (a path or a name).
 * The toolkit's stubs/libcuda.so is never searched: it only exists to link
 * against, and its cuInit fails (CUDA_ERROR_STUB_LIBRARY).
 *
 * Availability: the library loads, every entry point below resolves,
 * cuInit(0) succeeds and cuDeviceGetCount reports at least one device. Any
 * cuInit failure means "no CUDA", whatever its code. The outcome — entry
 * points, device 0's name and compute capability, or why there is no
 * device — is kept until rt_cuda_driver_shutdown or a test's
 * rt_cuda_driver_set_search_list. The library stays mapped once opened: a
 * driver that ran cuInit has threads and state that must not be unmapped.
 *
 * The types and function signatures below are written from NVIDIA's
 * documented driver API (CUresult an int enum, CUDA_SUCCESS = 0; CUdevice
 * an int; CUdeviceptr a 64-bit integer; contexts, modules, functions,
 * streams and events opaque pointers). The 64-bit entry points of the
 * memory functions are the `_v2` names the driver exports; cuda.h maps the
 * plain names onto them in the same way.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_dl.h"
#include "cuda_driver.h"

static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
  bool tried, ok;
  void *handle;
  rt_cuda_driver_api api;
  rt_cuda_device_info dev;
  char why[1024]; /* why there is no device */
} g;

static const char *const default_names[] = {"libcuda.so.1", "libcuda.so", NULL};
static const char *const *search_list = default_names;

/* Resolves every entry point; false (with g.why) if one is missing. */
static bool resolve(void *h, const char *lib) {
  static const cuda_dl_sym syms[] = {
      {"cuGetErrorName", offsetof(rt_cuda_driver_api, get_error_name)},
      {"cuGetErrorString", offsetof(rt_cuda_driver_api, get_error_string)},
      {"cuInit", offsetof(rt_cuda_driver_api, init)},
      {"cuDriverGetVersion", offsetof(rt_cuda_driver_api, driver_get_version)},
      {"cuDeviceGetCount", offsetof(rt_cuda_driver_api, device_get_count)},
      {"cuDeviceGet", offsetof(rt_cuda_driver_api, device_get)},
      {"cuDeviceGetName", offsetof(rt_cuda_driver_api, device_get_name)},
      {"cuDeviceGetAttribute", offsetof(rt_cuda_driver_api, device_get_attribute)},
      {"cuDevicePrimaryCtxRetain", offsetof(rt_cuda_driver_api, primary_ctx_retain)},
      {"cuCtxSetCurrent", offsetof(rt_cuda_driver_api, ctx_set_current)},
      {"cuModuleLoadData", offsetof(rt_cuda_driver_api, module_load_data)},
      {"cuModuleUnload", offsetof(rt_cuda_driver_api, module_unload)},
      {"cuModuleGetFunction", offsetof(rt_cuda_driver_api, module_get_function)},
      {"cuLaunchKernel", offsetof(rt_cuda_driver_api, launch_kernel)},
      {"cuMemAlloc_v2", offsetof(rt_cuda_driver_api, mem_alloc)},
      {"cuMemFree_v2", offsetof(rt_cuda_driver_api, mem_free)},
      {"cuMemcpyHtoD_v2", offsetof(rt_cuda_driver_api, memcpy_htod)},
      {"cuMemcpyDtoH_v2", offsetof(rt_cuda_driver_api, memcpy_dtoh)},
      {"cuMemcpyDtoD_v2", offsetof(rt_cuda_driver_api, memcpy_dtod)},
      {"cuStreamCreate", offsetof(rt_cuda_driver_api, stream_create)},
      {"cuStreamSynchronize", offsetof(rt_cuda_driver_api, stream_synchronize)},
      {"cuEventCreate", offsetof(rt_cuda_driver_api, event_create)},
      {"cuEventRecord", offsetof(rt_cuda_driver_api, event_record)},
      {"cuEventSynchronize", offsetof(rt_cuda_driver_api, event_synchronize)},
      {"cuEventElapsedTime", offsetof(rt_cuda_driver_api, event_elapsed_time)},
  };
  const char *missing = cuda_dl_resolve(h, syms, sizeof syms / sizeof syms[0], &g.api);
  if (missing) snprintf(g.why, sizeof g.why, "libcuda not usable: %s has no symbol %s", lib, missing);
  return missing == NULL;
}

/* Names of the codes cuInit and the device queries return, for drivers
 * whose cuGetErrorName fails (the toolkit's stub library does). */
static const char *known_name(cu_result r) {
  switch (r) {
  case 1: return "CUDA_ERROR_INVALID_VALUE";
  case 2: return "CUDA_ERROR_OUT_OF_MEMORY";
  case 3: return "CUDA_ERROR_NOT_INITIALIZED";
  case 4: return "CUDA_ERROR_DEINITIALIZED";
  case 34: return "CUDA_ERROR_STUB_LIBRARY";
  case 35: return "CUDA_ERROR_INSUFFICIENT_DRIVER";
  case 36: return "CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER";
  case 46: return "CUDA_ERROR_DEVICE_UNAVAILABLE";
  case 100: return "CUDA_ERROR_NO_DEVICE";
  case 101: return "CUDA_ERROR_INVALID_DEVICE";
  case 102: return "CUDA_ERROR_DEVICE_NOT_LICENSED";
  case 304: return "CUDA_ERROR_OPERATING_SYSTEM";
  case 801: return "CUDA_ERROR_NOT_SUPPORTED";
  case 802: return "CUDA_ERROR_SYSTEM_NOT_READY";
  case 803: return "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH";
  case 804: return "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE";
  case 999: return "CUDA_ERROR_UNKNOWN";
  default: return NULL;
  }
}

/* "CUDA_ERROR_NO_DEVICE (no CUDA-capable device is detected)" for r. */
static void describe(cu_result r, char *out, size_t len) {
  const char *name = NULL, *text = NULL;
  if (g.api.get_error_name(r, &name) != CUDA_SUCCESS || !name) name = known_name(r);
  if (g.api.get_error_string(r, &text) != CUDA_SUCCESS) text = NULL;
  if (name && text) snprintf(out, len, "%s (%s)", name, text);
  else if (name) snprintf(out, len, "%s (CUresult %d)", name, (int)r);
  else snprintf(out, len, "CUresult %d", (int)r);
}

const char *rt_cuda_driver_error(cu_result r, char *buf, size_t len) {
  if (!g.ok) snprintf(buf, len, "CUresult %d", (int)r);
  else describe(r, buf, len);
  return buf;
}

/* Under load_lock: cuInit, the device count, device 0's properties. */
static void probe(void) {
  char what[256];
  cu_result r = g.api.init(0);
  if (r != CUDA_SUCCESS) {
    describe(r, what, sizeof what);
    snprintf(g.why, sizeof g.why, "cuInit failed: %s", what);
    return;
  }
  int count = 0;
  r = g.api.device_get_count(&count);
  if (r != CUDA_SUCCESS) {
    describe(r, what, sizeof what);
    snprintf(g.why, sizeof g.why, "cuDeviceGetCount failed: %s", what);
    return;
  }
  if (count < 1) {
    snprintf(g.why, sizeof g.why, "no CUDA device (cuDeviceGetCount reports 0)");
    return;
  }
  cu_device d = 0;
  int major = 0, minor = 0;
  r = g.api.device_get(&d, 0);
  if (r == CUDA_SUCCESS) r = g.api.device_get_attribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d);
  if (r == CUDA_SUCCESS) r = g.api.device_get_attribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d);
  if (r == CUDA_SUCCESS) r = g.api.device_get_name(g.dev.name, (int)sizeof g.dev.name, d);
  if (r != CUDA_SUCCESS) {
    describe(r, what, sizeof what);
    snprintf(g.why, sizeof g.why, "querying CUDA device 0 failed: %s", what);
    return;
  }
  g.dev.name[sizeof g.dev.name - 1] = 0;
  g.dev.device = d;
  g.dev.count = count;
  g.dev.cc_major = major;
  g.dev.cc_minor = minor;
  g.ok = true;
}

/* Under load_lock. */
static void load(void) {
  if (g.tried) return;
  g.tried = true;
  const char *env = search_list == default_names ? getenv("KILN_CUDA_LIB") : NULL;
  const char *only[] = {env, NULL};
  const char *const *names = env && *env ? only : search_list;
  char tried[700] = "";
  void *h = NULL;
  const char *lib = NULL;
  for (int i = 0; !h && names[i]; i++) {
    size_t used = strlen(tried);
    snprintf(tried + used, sizeof tried - used, "%s%s", used ? ", " : "", names[i]);
    h = dlopen(lib = names[i], RTLD_NOW | RTLD_LOCAL);
  }
  if (!h) {
    const char *dl = dlerror();
    snprintf(g.why, sizeof g.why,
             "libcuda not found (tried %s; install the NVIDIA driver or set KILN_CUDA_LIB)%s%s", tried,
             dl ? "; last error: " : "", dl ? dl : "");
    return;
  }
  g.handle = h;
  if (!resolve(h, lib)) return;
  probe();
}

bool rt_cuda_device_available(char *why, size_t len) {
  pthread_mutex_lock(&load_lock);
  load();
  bool ok = g.ok;
  if (!ok && why && len) snprintf(why, len, "%s", g.why);
  pthread_mutex_unlock(&load_lock);
  return ok;
}

const rt_cuda_driver_api *rt_cuda_driver(rt_cuda_device_info *info) {
  pthread_mutex_lock(&load_lock);
  load();
  const rt_cuda_driver_api *api = g.ok ? &g.api : NULL;
  if (api && info) *info = g.dev;
  pthread_mutex_unlock(&load_lock);
  return api;
}

/* Forgets the outcome without dlclose (see the header comment). */
static void unload(void) { memset(&g, 0, sizeof g); }

void rt_cuda_driver_set_search_list(const char *const *names) {
  pthread_mutex_lock(&load_lock);
  unload();
  search_list = names ? names : default_names;
  pthread_mutex_unlock(&load_lock);
}

void rt_cuda_driver_shutdown(void) {
  pthread_mutex_lock(&load_lock);
  unload();
  pthread_mutex_unlock(&load_lock);
}
