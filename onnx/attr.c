/*
 * attr.c — what every operator of the importer uses: node attributes
 * with ONNX's defaults, errors that name the node, ONNX's axis rule and
 * host reads of the small integer tensors that shapes depend on.
 *
 * Attributes are looked up by name on each use: nodes have a handful.
 * A string attribute is protobuf bytes (not NUL-terminated): it is
 * copied into the caller's buffer.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_internal.h"

const Onnx__AttributeProto *onnx_attr(const onnx_ctx *c, const char *name) {
  for (size_t k = 0; k < c->node->n_attribute; k++) {
    const Onnx__AttributeProto *a = c->node->attribute[k];
    if (a->name && strcmp(a->name, name) == 0) return a;
  }
  return NULL;
}

int64_t onnx_attr_int(const onnx_ctx *c, const char *name, int64_t def) {
  const Onnx__AttributeProto *a = onnx_attr(c, name);
  return a && a->has_i ? a->i : def;
}

double onnx_attr_float(const onnx_ctx *c, const char *name, double def) {
  const Onnx__AttributeProto *a = onnx_attr(c, name);
  return a && a->has_f ? (double)a->f : def;
}

const char *onnx_attr_string(const onnx_ctx *c, const char *name, const char *def, char *buf, size_t len) {
  const Onnx__AttributeProto *a = onnx_attr(c, name);
  if (!a || !a->has_s) {
    snprintf(buf, len, "%s", def);
    return buf;
  }
  size_t n = a->s.len < len - 1 ? a->s.len : len - 1;
  if (n) memcpy(buf, a->s.data, n);
  buf[n] = '\0';
  return buf;
}

int onnx_attr_ints(const onnx_ctx *c, const char *name, const int64_t **vals) {
  const Onnx__AttributeProto *a = onnx_attr(c, name);
  if (!a || (a->n_ints == 0 && a->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS)) return -1;
  *vals = a->ints;
  return (int)a->n_ints;
}

int onnx_attr_floats(const onnx_ctx *c, const char *name, const float **vals) {
  const Onnx__AttributeProto *a = onnx_attr(c, name);
  if (!a || (a->n_floats == 0 && a->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS)) return -1;
  *vals = a->floats;
  return (int)a->n_floats;
}

int onnx_fail(const onnx_ctx *c, kiln_status status, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  const char *name = c->node->name && *c->node->name ? c->node->name : "";
  return api_error(status, "kiln_onnx_run", "node '%s' (%s): %s", name, c->node->op_type, msg);
}

int onnx_status(void) {
  kiln_status s = api_status();
  return s == KILN_OK ? KILN_ERR_ARG : s;
}

int onnx_read_ints(const onnx_ctx *c, kiln_tensor *t, int64_t *vals, int max, const char *what) {
  int64_t n = kiln_numel(t);
  if (n < 0) return -1;
  if (n > max) {
    onnx_fail(c, KILN_ERR_UNSUPPORTED, "%s holds %lld values (at most %d)", what, (long long)n, max);
    return -1;
  }
  /* never released here: operators run inside the node's scope, which
   * owns the converted tensor (and a kiln_release of a scope-owned
   * handle that the caller also holds would leave the scope's reference
   * to free the caller's) */
  kiln_tensor *i64 = kiln_dtype_of(t) == KILN_I64 ? t : kiln_to_dtype(t, KILN_I64);
  int rc = i64 ? kiln_read(i64, vals, (size_t)n * sizeof *vals) : onnx_status();
  return rc < 0 ? -1 : (int)n;
}

int onnx_axis(const onnx_ctx *c, int64_t axis, int ndim) {
  if (axis < -(int64_t)ndim || axis >= (ndim ? ndim : 1)) {
    onnx_fail(c, KILN_ERR_ARG, "axis %lld is out of range for rank %d", (long long)axis, ndim);
    return -1;
  }
  return (int)(axis < 0 ? axis + ndim : axis);
}

int onnx_set(kiln_tensor **out, kiln_tensor *t) {
  *out = t;
  return t ? KILN_OK : onnx_status();
}
