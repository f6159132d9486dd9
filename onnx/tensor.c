/*
 * tensor.c — ONNX TensorProto → Kiln tensor: initializers, Constant
 * values and the .pb files of ONNX's test data.
 *
 * A TensorProto holds its elements in one of three places: raw_data
 * (little-endian bytes, the usual form), a typed repeated field
 * (float_data, int32_data — which also carries 8- and 16-bit integers,
 * bool and the bit patterns of float16/bfloat16 —, int64_data,
 * double_data), or an external file (data_location EXTERNAL: the keys
 * location, offset, length, relative to the model's folder). Each is
 * checked against the element count of dims before anything is copied.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_internal.h"

bool onnx_dtype(int32_t code, kiln_dtype *out) {
  switch (code) {
  case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT: *out = KILN_F32; return true;
  case ONNX__TENSOR_PROTO__DATA_TYPE__UINT8: *out = KILN_U8; return true;
  case ONNX__TENSOR_PROTO__DATA_TYPE__INT8: *out = KILN_I8; return true;
  case ONNX__TENSOR_PROTO__DATA_TYPE__INT16: *out = KILN_I16; return true;
  case ONNX__TENSOR_PROTO__DATA_TYPE__INT32: *out = KILN_I32; return true;
  case ONNX__TENSOR_PROTO__DATA_TYPE__INT64: *out = KILN_I64; return true;
  case ONNX__TENSOR_PROTO__DATA_TYPE__BOOL: *out = KILN_BOOL; return true;
  case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16: *out = KILN_F16; return true;
  case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE: *out = KILN_F64; return true;
  case ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16: *out = KILN_BF16; return true;
  default: return false;
  }
}

static const char *tensor_name(const Onnx__TensorProto *t) { return t->name ? t->name : ""; }

/* Element size in bytes of a dtype this file handles. */
static size_t elem_size(kiln_dtype d) {
  switch (d) {
  case KILN_BOOL:
  case KILN_U8:
  case KILN_I8: return 1;
  case KILN_I16:
  case KILN_F16:
  case KILN_BF16: return 2;
  case KILN_I32:
  case KILN_F32: return 4;
  default: return 8;
  }
}

/* The number of elements the typed field that dtype d uses holds. */
static int64_t field_count(const Onnx__TensorProto *t, kiln_dtype d) {
  switch (d) {
  case KILN_F32: return (int64_t)t->n_float_data;
  case KILN_F64: return (int64_t)t->n_double_data;
  case KILN_I64: return (int64_t)t->n_int64_data;
  default: return (int64_t)t->n_int32_data;
  }
}

/* The typed field's n elements (field_count(t, d) == n, checked by the
 * caller) converted to dtype d into buf [n]. */
static void from_fields(const Onnx__TensorProto *t, kiln_dtype d, int64_t n, void *buf) {
  switch (d) {
  case KILN_F32: memcpy(buf, t->float_data, (size_t)n * 4); return;
  case KILN_F64: memcpy(buf, t->double_data, (size_t)n * 8); return;
  case KILN_I64: memcpy(buf, t->int64_data, (size_t)n * 8); return;
  default: break;
  }
  for (int64_t k = 0; k < n; k++) {
    int32_t v = t->int32_data[k];
    switch (d) {
    case KILN_I32: ((int32_t *)buf)[k] = v; break;
    case KILN_I16:
    case KILN_F16:
    case KILN_BF16: ((uint16_t *)buf)[k] = (uint16_t)v; break;
    case KILN_BOOL: ((uint8_t *)buf)[k] = v != 0; break;
    default: ((uint8_t *)buf)[k] = (uint8_t)v; break;
    }
  }
}

/* The bytes [offset, offset + len) of the external file named by t's
 * keys (relative to dir), in a buffer of malloc's (the caller frees it);
 * NULL with the error set when the keys are bad or the file is shorter,
 * checked before anything is allocated. */
static void *read_external(const Onnx__TensorProto *t, const char *dir, size_t len, const char *fn) {
  const char *loc = NULL;
  long long offset = 0, length = -1;
  for (size_t k = 0; k < t->n_external_data; k++) {
    const Onnx__StringStringEntryProto *e = t->external_data[k];
    if (!e->key || !e->value) continue;
    if (strcmp(e->key, "location") == 0) loc = e->value;
    else if (strcmp(e->key, "offset") == 0) offset = atoll(e->value);
    else if (strcmp(e->key, "length") == 0) length = atoll(e->value);
  }
  if (!dir) {
    api_error(KILN_ERR_UNSUPPORTED, fn, "tensor '%s' has external data, which a model loaded from memory cannot read",
              tensor_name(t));
    return NULL;
  }
  if (!loc || loc[0] == '/' || strstr(loc, "..") || offset < 0 || (length >= 0 && (size_t)length != len)) {
    api_error(KILN_ERR_IO, fn, "tensor '%s': bad external data (location %s, offset %lld, length %lld, needs %zu bytes)",
              tensor_name(t), loc ? loc : "missing", offset, length, len);
    return NULL;
  }
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, loc);
  FILE *f = fopen(path, "rb");
  long size = f && fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
  void *buf = NULL;
  if (size >= 0 && (unsigned long long)size >= (unsigned long long)offset + len) {
    buf = malloc(len ? len : 1);
    if (!buf) api_error(KILN_ERR_OOM, fn, "out of memory for tensor '%s' (%zu bytes)", tensor_name(t), len);
    else if (fseek(f, (long)offset, SEEK_SET) != 0 || fread(buf, 1, len, f) != len) {
      free(buf);
      buf = NULL;
      size = -1;
    }
  } else size = -1;
  if (f) fclose(f);
  if (size < 0)
    api_error(KILN_ERR_IO, fn, "tensor '%s': cannot read %zu bytes at offset %lld of %s", tensor_name(t), len, offset,
              path);
  return buf;
}

kiln_tensor *onnx_tensor_from_proto(const Onnx__TensorProto *t, const char *dir, const char *fn) {
  kiln_dtype d;
  if (!onnx_dtype(t->data_type, &d)) {
    api_error(KILN_ERR_UNSUPPORTED, fn, "tensor '%s' has ONNX data type %d, which Kiln lacks", tensor_name(t),
              (int)t->data_type);
    return NULL;
  }
  if (t->n_dims > KILN_MAX_DIMS) {
    api_error(KILN_ERR_UNSUPPORTED, fn, "tensor '%s' has %zu dims (at most %d)", tensor_name(t), t->n_dims, KILN_MAX_DIMS);
    return NULL;
  }
  int64_t n = 1;
  for (size_t k = 0; k < t->n_dims; k++) {
    if (t->dims[k] < 0 || __builtin_mul_overflow(n, t->dims[k], &n) || n > ((int64_t)1 << 40)) {
      api_error(KILN_ERR_SHAPE, fn, "tensor '%s' has dim %zu of size %lld (negative or too large)", tensor_name(t), k,
                (long long)t->dims[k]);
      return NULL;
    }
  }
  size_t bytes = (size_t)n * elem_size(d);
  bool external = t->has_data_location && t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
  if (!external && t->raw_data.len > 0 && t->raw_data.len != bytes) {
    api_error(KILN_ERR_SHAPE, fn, "tensor '%s': raw_data holds %zu bytes, its dims need %zu", tensor_name(t),
              t->raw_data.len, bytes);
    return NULL;
  }
  if (!external && t->raw_data.len == 0 && n > 0 && field_count(t, d) != n) {
    api_error(KILN_ERR_SHAPE, fn, "tensor '%s': its data fields hold %lld of the %lld elements its dims need",
              tensor_name(t), (long long)field_count(t, d), (long long)n);
    return NULL;
  }
  void *buf = external ? read_external(t, dir, bytes, fn) : malloc(bytes ? bytes : 1);
  if (!buf) {
    if (!external) api_error(KILN_ERR_OOM, fn, "out of memory for tensor '%s' (%zu bytes)", tensor_name(t), bytes);
    return NULL;
  }
  if (!external && t->raw_data.len > 0) memcpy(buf, t->raw_data.data, bytes);
  else if (!external && n > 0) from_fields(t, d, n, buf);
  int64_t sizes[KILN_MAX_DIMS];
  for (size_t k = 0; k < t->n_dims; k++) sizes[k] = t->dims[k];
  kiln_tensor *r = kiln_from_data(d, (int)t->n_dims, sizes, buf);
  free(buf);
  return r;
}
