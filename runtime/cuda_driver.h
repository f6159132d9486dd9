/*
 * cuda_driver.h — the CUDA driver API, loaded with dlopen at run time
 * (cuda_driver.c), and the device probe. The few types and constants Kiln
 * needs are declared here from NVIDIA's documented API (the cu_* types
 * and CUDA_* constants are the driver's own names, lower-cased), so no
 * cuda.h is needed to build. Internal to runtime/ (and white-box tests).
 */
#ifndef KILN_RT_CUDA_DRIVER_H
#define KILN_RT_CUDA_DRIVER_H

#include <stdbool.h>
#include <stddef.h>

typedef int cu_result; /* CUresult */
typedef int cu_device; /* CUdevice: an ordinal */
typedef unsigned long long cu_deviceptr;
typedef struct cu_ctx_s *cu_context;
typedef struct cu_mod_s *cu_module;
typedef struct cu_func_s *cu_function;
typedef struct cu_stream_s *cu_stream;
typedef struct cu_event_s *cu_event;

enum {
  CUDA_SUCCESS = 0,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
};

/** The driver's entry points (names in cuda_driver.c's table; the memory
 *  functions are the 64-bit `_v2` exports). */
typedef struct rt_cuda_driver_api {
  cu_result (*get_error_name)(cu_result, const char **);
  cu_result (*get_error_string)(cu_result, const char **);
  cu_result (*init)(unsigned flags);
  cu_result (*driver_get_version)(int *);
  cu_result (*device_get_count)(int *);
  cu_result (*device_get)(cu_device *, int ordinal);
  cu_result (*device_get_name)(char *, int len, cu_device);
  cu_result (*device_get_attribute)(int *, int attrib, cu_device);
  cu_result (*primary_ctx_retain)(cu_context *, cu_device);
  cu_result (*ctx_set_current)(cu_context);
  cu_result (*module_load_data)(cu_module *, const void *image);
  cu_result (*module_unload)(cu_module);
  cu_result (*module_get_function)(cu_function *, cu_module, const char *name);
  cu_result (*launch_kernel)(cu_function, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                             unsigned bz, unsigned shared_bytes, cu_stream, void **params, void **extra);
  cu_result (*mem_alloc)(cu_deviceptr *, size_t bytes);
  cu_result (*mem_free)(cu_deviceptr);
  cu_result (*memcpy_htod)(cu_deviceptr dst, const void *src, size_t bytes);
  cu_result (*memcpy_dtoh)(void *dst, cu_deviceptr src, size_t bytes);
  cu_result (*memcpy_dtod)(cu_deviceptr dst, cu_deviceptr src, size_t bytes);
  cu_result (*stream_create)(cu_stream *, unsigned flags);
  cu_result (*stream_synchronize)(cu_stream);
  cu_result (*event_create)(cu_event *, unsigned flags);
  cu_result (*event_record)(cu_event, cu_stream);
  cu_result (*event_synchronize)(cu_event);
  cu_result (*event_elapsed_time)(float *ms, cu_event start, cu_event end);
} rt_cuda_driver_api;

/** Device 0, as probed when the driver loaded. */
typedef struct rt_cuda_device_info {
  cu_device device;
  int count;              /* devices the driver reports */
  int cc_major, cc_minor; /* compute capability: sm_<major><minor> */
  char name[128];
} rt_cuda_device_info;

/** True when libcuda loads, cuInit succeeds and there is at least one
 *  device (probed once; thread-safe). On false, why (if non-NULL) gets the
 *  reason: "libcuda not found (tried ...)", "cuInit failed:
 *  CUDA_ERROR_NO_DEVICE (...)", "no CUDA device (...)", ... */
bool rt_cuda_device_available(char *why, size_t len);

/** The loaded entry points and device 0's properties (info may be NULL),
 *  or NULL when rt_cuda_device_available is false. Valid until
 *  rt_cuda_driver_shutdown. */
const rt_cuda_driver_api *rt_cuda_driver(rt_cuda_device_info *info);

/** "CUDA_ERROR_X (description)" for r in buf (returned). */
const char *rt_cuda_driver_error(cu_result r, char *buf, size_t len);

/** For tests: replaces the library names tried (NULL-terminated; must
 *  outlive its use) and forgets the probe, so the next call loads again;
 *  NULL restores the default (libcuda.so.1, libcuda.so; or only
 *  KILN_CUDA_LIB when set). Not thread-safe with concurrent use. */
void rt_cuda_driver_set_search_list(const char *const *names);

/** Forgets the probe (the library stays mapped); the next call probes
 *  again and reads KILN_CUDA_LIB again. */
void rt_cuda_driver_shutdown(void);

#endif /* KILN_RT_CUDA_DRIVER_H */
