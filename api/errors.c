/*
 * errors.c — the thread-local first error and argument checks shared by
 * every API function. Errors never abort: a function that fails records its
 * message here and returns NULL or a negative kiln_status.
 */
#include <stdio.h>
#include <string.h>

#include "api_internal.h"

static _Thread_local kiln_status last_status = KILN_OK;
static _Thread_local char last_message[512];
static _Thread_local kiln_status recent_status = KILN_OK; /* api_status */

int api_error(kiln_status status, const char *fn, const char *fmt, ...) {
  recent_status = status;
  if (last_status != KILN_OK) return status;
  last_status = status;
  int n = snprintf(last_message, sizeof last_message, "%s: ", fn);
  if (n < 0 || (size_t)n >= sizeof last_message) return status;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_message + n, sizeof last_message - (size_t)n, fmt, ap);
  va_end(ap);
  return status;
}

KILN_API const char *kiln_last_error(void) { return last_status == KILN_OK ? "" : last_message; }
KILN_API kiln_status kiln_last_status(void) { return last_status; }
kiln_status api_status(void) { return recent_status; }
KILN_API void kiln_clear_error(void) {
  last_status = KILN_OK;
  recent_status = KILN_OK;
  last_message[0] = 0;
}

KILN_API const char *kiln_status_name(kiln_status s) { return graph_status_name(s); }

const char *api_fmt_sizes(char *buf, size_t len, int ndim, const int64_t *sizes) {
  size_t used = 0;
  buf[0] = 0;
  used += (size_t)snprintf(buf, len, "[");
  for (int i = 0; i < ndim && used < len; i++)
    used += (size_t)snprintf(buf + used, len - used, i ? ", %lld" : "%lld", (long long)sizes[i]);
  if (used < len) snprintf(buf + used, len - used, "]");
  return buf;
}

/* What each kind of handle is called, and how one dies (death code 0). */
static const char *const handle_noun[GRAPH_HANDLE_KINDS] = {
    [GRAPH_HANDLE_TENSOR] = "a Kiln tensor",          [GRAPH_HANDLE_STORAGE] = "a Kiln storage",
    [GRAPH_HANDLE_OPTIMIZER] = "a Kiln optimizer",    [GRAPH_HANDLE_ONNX_MODEL] = "a Kiln ONNX model"};
static const char *const handle_death[GRAPH_HANDLE_KINDS] = {
    [GRAPH_HANDLE_TENSOR] = "used after its last kiln_release",
    [GRAPH_HANDLE_STORAGE] = "used after its last reference was dropped",
    [GRAPH_HANDLE_OPTIMIZER] = "used after kiln_optimizer_free",
    [GRAPH_HANDLE_ONNX_MODEL] = "used after kiln_onnx_free"};

bool api_check_handle(graph_handle_kind k, const void *p, const char *fn, const char *arg) {
  int death = 0;
  graph_handle_state st = p ? graph_handle_state_of(k, p, &death) : GRAPH_HANDLE_FOREIGN;
  if (st == GRAPH_HANDLE_LIVE) return true;
  if (!p) api_error(KILN_ERR_ARG, fn, "argument %s is NULL", arg);
  else if (st == GRAPH_HANDLE_DEAD && k == GRAPH_HANDLE_TENSOR && death > 0)
    api_error(KILN_ERR_ARG, fn,
              "argument %s was released (used after the kiln_scope_end of the scope that owned it, opened at "
              "depth %d)",
              arg, death);
  else if (st == GRAPH_HANDLE_DEAD && death == GRAPH_HANDLE_DEATH_UNKNOWN)
    api_error(KILN_ERR_ARG, fn, "argument %s was released (long ago: how it died is no longer kept)", arg);
  else if (st == GRAPH_HANDLE_DEAD)
    api_error(KILN_ERR_ARG, fn, "argument %s was released (%s)", arg, handle_death[k]);
  else
    api_error(KILN_ERR_ARG, fn, "argument %s (%p) is not %s (never made by Kiln, or not the pointer Kiln returned)",
              arg, p, handle_noun[k]);
  return false;
}

bool api_check(const kiln_tensor *t, const char *fn, const char *arg) {
  return api_check_handle(GRAPH_HANDLE_TENSOR, t, fn, arg);
}

int api_check_list(const void *list, int n, const char *what, const char *fn) {
  if (n < 0) return api_error(KILN_ERR_ARG, fn, "n = %d is negative", n);
  if (n > 0 && !list) return api_error(KILN_ERR_ARG, fn, "the %s list is NULL (n = %d)", what, n);
  return KILN_OK;
}

int api_wrap_dim(int dim, int ndim, const char *fn) {
  int n = ndim > 0 ? ndim : 1;
  if (dim < -n || dim >= n) {
    api_error(KILN_ERR_ARG, fn, "dim %d out of range for a %d-d tensor (expected [%d, %d])", dim, ndim, -n, n - 1);
    return -1;
  }
  return dim < 0 ? dim + n : dim;
}

bool api_check_dtype(kiln_dtype d, const char *fn) {
  if (graph_dtype_valid(d)) return true;
  api_error(KILN_ERR_DTYPE, fn, "invalid dtype %d", (int)d);
  return false;
}

bool api_check_sizes(int ndim, const int64_t *sizes, const char *fn) {
  if (ndim < 0 || ndim > KILN_MAX_DIMS) {
    api_error(KILN_ERR_ARG, fn, "ndim %d outside [0, %d]", ndim, KILN_MAX_DIMS);
    return false;
  }
  if (ndim > 0 && !sizes) {
    api_error(KILN_ERR_ARG, fn, "sizes is NULL for ndim %d", ndim);
    return false;
  }
  /* span: the product of the sizes with 0 counted as 1, which contiguous
   * strides reach (graph_contiguous_strides); it bounds the element count
   * and must fit even when a zero size makes the tensor empty, as in
   * PyTorch ("Stride calculation overflowed") */
  int64_t span = 1;
  for (int i = 0; i < ndim; i++) {
    if (sizes[i] < 0) {
      char b[256];
      api_error(KILN_ERR_SHAPE, fn, "negative size in %s", api_fmt_sizes(b, sizeof b, ndim, sizes));
      return false;
    }
    if (sizes[i] > 0 && span > INT64_MAX / 8 / sizes[i]) {
      char b[256];
      api_error(KILN_ERR_SHAPE, fn, "sizes %s overflow the element count or the strides",
                api_fmt_sizes(b, sizeof b, ndim, sizes));
      return false;
    }
    span *= sizes[i] > 0 ? sizes[i] : 1;
  }
  return true;
}
