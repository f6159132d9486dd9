/*
 * profile.c — the public profiler API over the runtime's kernel records.
 */
#include "api_internal.h"
#include "runtime.h"

KILN_API void kiln_profile_begin(void) { rt_profile_begin(); }
KILN_API void kiln_profile_end(void) { rt_profile_end(); }
KILN_API int kiln_profile_count(void) { return rt_profile_count(); }

KILN_API int kiln_profile_get(int i, kiln_kernel_record *out) {
  if (!out) return api_error(KILN_ERR_ARG, "kiln_profile_get", "out is NULL");
  if (!rt_profile_get(i, out))
    return api_error(KILN_ERR_INDEX, "kiln_profile_get", "record %d out of range [0, %d)", i, rt_profile_count());
  return KILN_OK;
}
