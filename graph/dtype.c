/*
 * dtype.c — the dtype traits table, Torch's type promotion, and host-side
 * scalar conversion (used by creation, kiln_get/kiln_set and printing).
 *
 * Conversions follow C/Torch: float→int truncates toward zero, →BOOL is
 * v != 0, F16 and BF16 round to nearest even (NaN stays NaN).
 */
#include <assert.h>
#include <math.h>
#include <string.h>

#include "graph.h"

const graph_dtype_traits graph_dtypes[KILN_DTYPE_COUNT] = {
    [KILN_BOOL] = {"bool", "Bool", 1, GRAPH_CAT_BOOL, false, 1},
    [KILN_U8] = {"u8", "Byte", 1, GRAPH_CAT_INT, false, 8},
    [KILN_I8] = {"i8", "Char", 1, GRAPH_CAT_INT, true, 8},
    [KILN_I16] = {"i16", "Short", 2, GRAPH_CAT_INT, true, 16},
    [KILN_I32] = {"i32", "Int", 4, GRAPH_CAT_INT, true, 32},
    [KILN_I64] = {"i64", "Long", 8, GRAPH_CAT_INT, true, 64},
    [KILN_F16] = {"f16", "Half", 2, GRAPH_CAT_FLOAT, true, 16},
    [KILN_BF16] = {"bf16", "BFloat16", 2, GRAPH_CAT_FLOAT, true, 16},
    [KILN_F32] = {"f32", "Float", 4, GRAPH_CAT_FLOAT, true, 32},
    [KILN_F64] = {"f64", "Double", 8, GRAPH_CAT_FLOAT, true, 64},
};
_Static_assert(KILN_DTYPE_COUNT == 10, "graph_dtypes must list every dtype");

static kiln_dtype default_float = KILN_F32;

kiln_dtype graph_default_float(void) { return default_float; }
void graph_set_default_float(kiln_dtype d) { default_float = d; }

/* Torch's promote_types: the smallest dtype that holds both. */
kiln_dtype graph_promote(kiln_dtype a, kiln_dtype b) {
  if (a == b) return a;
  const graph_dtype_traits *ta = &graph_dtypes[a], *tb = &graph_dtypes[b];
  if (ta->category != tb->category) return ta->category > tb->category ? a : b;
  if (ta->category == GRAPH_CAT_FLOAT) {
    bool half_pair = (a == KILN_F16 && b == KILN_BF16) || (a == KILN_BF16 && b == KILN_F16);
    if (half_pair) return KILN_F32;
    return ta->size >= tb->size ? a : b;
  }
  /* integers */
  if (ta->is_signed == tb->is_signed) return ta->size >= tb->size ? a : b;
  kiln_dtype u = ta->is_signed ? b : a, s = ta->is_signed ? a : b; /* u is U8 */
  if (graph_dtypes[s].size > graph_dtypes[u].size) return s;
  return KILN_I16; /* U8 with I8 */
}

kiln_dtype graph_compute_dtype(kiln_dtype d) {
  return (d == KILN_F16 || d == KILN_BF16) ? KILN_F32 : d;
}

/* ---- half precision, by bit manipulation (round to nearest even) ---- */

static uint32_t f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

uint16_t graph_f32_to_bf16(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

float graph_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t graph_f32_to_f16(float f) {
  uint32_t u = f32_bits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u); /* NaN */
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* overflow → inf */
  if (a < 0x38800000u) {                                   /* subnormal or zero */
    /* value = a as float; scale so the result's lsb is 2^-24, round even */
    float v = bits_f32(a) * 16777216.0f; /* exact: multiply by 2^24 */
    float r = rintf(v);                  /* ties to even in default mode */
    return (uint16_t)(sign | (uint32_t)r);
  }
  uint32_t mant_odd = (a >> 13) & 1u;
  a += 0xfffu + mant_odd;
  a -= 0x38000000u; /* rebias exponent 127 → 15 */
  return (uint16_t)(sign | (a >> 13));
}

float graph_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0) { /* zero or subnormal: mant * 2^-24 */
    float v = (float)mant * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  if (exp == 31) return bits_f32(sign | 0x7f800000u | (mant << 13));
  return bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
}

/* ---- element <-> double ---- */

double graph_load_scalar(kiln_dtype d, const void *p) {
  switch (d) {
  case KILN_BOOL: return *(const uint8_t *)p != 0;
  case KILN_U8: return *(const uint8_t *)p;
  case KILN_I8: return *(const int8_t *)p;
  case KILN_I16: { int16_t v; memcpy(&v, p, 2); return v; }
  case KILN_I32: { int32_t v; memcpy(&v, p, 4); return v; }
  case KILN_I64: { int64_t v; memcpy(&v, p, 8); return (double)v; }
  case KILN_F16: { uint16_t v; memcpy(&v, p, 2); return graph_f16_to_f32(v); }
  case KILN_BF16: { uint16_t v; memcpy(&v, p, 2); return graph_bf16_to_f32(v); }
  case KILN_F32: { float v; memcpy(&v, p, 4); return v; }
  case KILN_F64: { double v; memcpy(&v, p, 8); return v; }
  default: return NAN;
  }
}

/* Floats: the IEEE bits of the value as a double, -0.0 made +0.0 and
 * any NaN the one positive quiet NaN, then mapped so that unsigned order
 * is numeric order (negative: all bits flipped; positive: sign bit set).
 * Integers: the value with its sign bit flipped. */
uint64_t graph_order_key(kiln_dtype d, const void *p) {
  if (!graph_is_float(d)) {
    int64_t v;
    if (d == KILN_I64) memcpy(&v, p, 8);
    else v = (int64_t)graph_load_scalar(d, p);
    return (uint64_t)v ^ (1ULL << 63);
  }
  double x = graph_load_scalar(d, p);
  if (x == 0) x = 0;
  if (isnan(x)) x = NAN;
  uint64_t b;
  memcpy(&b, &x, 8);
  if (isnan(x)) b &= ~(1ULL << 63);
  return (b >> 63) ? ~b : b | (1ULL << 63);
}

/* Truncates toward zero; values outside int64 (and NaN) give INT64_MIN as
 * on x86, then narrower types wrap. */
static int64_t to_int64(double v) {
  if (!(v > -9223372036854775808.0 && v < 9223372036854775808.0)) return INT64_MIN;
  return (int64_t)v;
}

void graph_store_scalar(kiln_dtype d, void *p, double v) {
  switch (d) {
  case KILN_BOOL: *(uint8_t *)p = v != 0; break;
  case KILN_U8: *(uint8_t *)p = (uint8_t)to_int64(v); break;
  case KILN_I8: *(int8_t *)p = (int8_t)to_int64(v); break;
  case KILN_I16: { int16_t x = (int16_t)to_int64(v); memcpy(p, &x, 2); break; }
  case KILN_I32: { int32_t x = (int32_t)to_int64(v); memcpy(p, &x, 4); break; }
  case KILN_I64: { int64_t x = to_int64(v); memcpy(p, &x, 8); break; }
  case KILN_F16: { uint16_t x = graph_f32_to_f16((float)v); memcpy(p, &x, 2); break; }
  case KILN_BF16: { uint16_t x = graph_f32_to_bf16((float)v); memcpy(p, &x, 2); break; }
  case KILN_F32: { float x = (float)v; memcpy(p, &x, 4); break; }
  case KILN_F64: memcpy(p, &v, 8); break;
  default: assert(!"bad dtype");
  }
}

void graph_int_range(kiln_dtype t, int64_t *min, int64_t *max) {
  int bits = graph_dtypes[t].bits;
  bool s = graph_dtypes[t].is_signed;
  *max = (int64_t)((UINT64_C(1) << (s ? bits - 1 : bits)) - 1);
  *min = s ? -*max - 1 : 0;
}
