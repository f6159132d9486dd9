/*
 * prog_ref.h — the host reference of fuzz_program: a small eager
 * interpreter over plain arrays that follows Torch's semantics (views of
 * flat storages, type promotion, wrapping integers, in-place writes seen
 * through every view) for the subset of ops fuzz_program decodes.
 *
 * Every element carries an error bound: 0 means Kiln must give exactly
 * this value (bit for bit, except that +0 equals -0 and any NaN equals
 * NaN), a positive bound is the largest difference an order of summation
 * or a transcendental's accuracy may make (floats only), and INFINITY
 * means "any value" — used where Torch leaves the value undefined (a
 * float out of an integer's range converted to it) or where an inexact
 * input sits so close to a discontinuity (a comparison, floor, a
 * conversion to an integer) that either side is right.
 *
 * Each function returns the kiln_status Kiln must return for the same
 * call (KILN_OK or the error), and only on KILN_OK changes the model. A
 * result is a new storage of the model, a view of an existing one, or a
 * write into one; at most P_MAX_STORES storages per program (KILN_OK
 * with *out->st < 0 means the model is full: the caller skips the op).
 */
#ifndef KILN_FUZZ_PROG_REF_H
#define KILN_FUZZ_PROG_REF_H

#include <stdbool.h>
#include <stdint.h>

#include "kiln/kiln.h"

#define P_MAX_DIMS 4      /* dims of a tensor the decoder makes */
#define P_MAX_SIZE 6      /* elements per dim the decoder makes */
#define P_MAX_STORES 96   /* storages per program */
#define P_MAX_NUMEL 1296  /* elements of a view or storage: 6^4 */

/* One element: floats in f, BOOL and integers in i (wrapped to the
 * dtype); e is the error bound (see above). */
typedef struct pval {
  double f;
  int64_t i;
  double e;
} pval;

typedef struct pstore {
  kiln_dtype dt;
  int64_t n;
  pval *x; /* [n] */
} pstore;

/* A view: storage index, sizes/strides in elements, offset. */
typedef struct pview {
  int st;
  int ndim;
  int64_t size[P_MAX_DIMS], stride[P_MAX_DIMS], off;
} pview;

typedef struct pmodel {
  pstore s[P_MAX_STORES];
  int n;
} pmodel;

/* An operand of an elementwise op: a view, or a double scalar. */
typedef struct poperand {
  const pview *v; /* NULL for a scalar */
  double s;
} poperand;

typedef enum punary {
  PU_NEG, PU_ABS, PU_SIGN, PU_RELU, PU_FLOOR, PU_CEIL, PU_ROUND, PU_TRUNC,
  PU_SQRT, PU_EXP, PU_TANH, PU_SIGMOID, PU_RECIPROCAL, PU_LOGICAL_NOT, PU_COUNT
} punary;

typedef enum pbinary {
  PB_ADD, PB_SUB, PB_MUL, PB_DIV, PB_MAXIMUM, PB_MINIMUM, PB_FMOD, PB_REMAINDER,
  PB_EQ, PB_NE, PB_LT, PB_LE, PB_GT, PB_GE, PB_AND, PB_OR, PB_XOR, PB_COUNT
} pbinary;

typedef enum preduce { PR_SUM, PR_PROD, PR_AMAX, PR_AMIN, PR_MEAN, PR_ALL, PR_ANY, PR_COUNT } preduce;

/* ---- the model ---- */
void pm_reset(pmodel *m);
/** A new storage of n elements, all zero; -1 when the model is full or n
 *  is past P_MAX_NUMEL (the fixed arrays of the reference). */
int pm_new(pmodel *m, kiln_dtype dt, int64_t n);
/** A new zeroed storage for a contiguous tensor of sizes [ndim], viewed
 *  by *out; its index, or -1 (out->st too) when the model is full. */
int pm_new_view(pmodel *m, kiln_dtype dt, int ndim, const int64_t *sizes, pview *out);
pview pv_contiguous(int st, int ndim, const int64_t *sizes);
int64_t pv_numel(const pview *v);
/** Storage offsets of v's elements in row-major order into out [numel]. */
void pv_offsets(const pview *v, int64_t *out);
/** True when two elements of v share a storage element. */
bool pv_overlaps(const pview *v);
/** True when a dim of size > 1 has stride 0 (Kiln refuses writes). */
bool pv_repeats(const pview *v);
bool pv_is_contiguous(const pview *v);
kiln_dtype pm_dtype(const pmodel *m, const pview *v);

/* ---- dtypes ---- */
bool pd_is_float(kiln_dtype d);
/** Kiln's value of element x (of dtype from) converted to dtype to. */
pval pd_convert(pval x, kiln_dtype from, kiln_dtype to);
/** The value a double (a fill value, a scalar) takes in dtype d. */
pval pd_from_double(double v, kiln_dtype d);
/** An element of dtype d (as stored) as a pval (exact). */
pval pd_load(kiln_dtype d, const void *p);
/** Stores float value v (exactly representable in float dtype d) at p. */
void pd_encode(kiln_dtype d, double v, void *p);
/** Whether got (an element of dtype d, as Kiln stored it) matches want. */
bool pd_matches(kiln_dtype d, pval want, const void *got);
/** Two values (one per run) within the sum of their bounds. */
bool pd_agree(kiln_dtype d, const void *a, const void *b, double e);

/* ---- ops: each returns the status Kiln must give ---- */
int pr_unary(pmodel *m, punary op, const pview *a, pview *out);
int pr_binary(pmodel *m, pbinary op, poperand a, poperand b, pview *out);
int pr_where(pmodel *m, const pview *c, const pview *a, const pview *b, pview *out);
int pr_clamp(pmodel *m, const pview *a, double lo, double hi, pview *out);
/** A contiguous copy in dtype d (clone, to_dtype). */
int pr_copy_as(pmodel *m, const pview *a, kiln_dtype d, pview *out);
/** mask: bit per dim (0 = every dim); keepdim. */
int pr_reduce(pmodel *m, preduce op, const pview *a, unsigned mask, bool keepdim, pview *out);
int pr_argmax(pmodel *m, bool max, const pview *a, int dim, bool keepdim, pview *out);
int pr_index_select(pmodel *m, const pview *t, int dim, const pview *idx, pview *out);
int pr_gather(pmodel *m, const pview *t, int dim, const pview *idx, pview *out);

/* in-place writes into t's storage */
int pr_fill(pmodel *m, const pview *t, double value);
int pr_copy(pmodel *m, const pview *dst, const pview *src);
int pr_index_fill(pmodel *m, const pview *t, int dim, const pview *idx, double value);
int pr_index_put(pmodel *m, const pview *t, int dim, const pview *idx, const pview *src, bool add);
int pr_masked_fill(pmodel *m, const pview *t, const pview *mask, double value);
int pr_set(pmodel *m, const pview *t, const int64_t *index, double value);
/** The element at index (negative counts from the end) into *out. */
int pr_get(const pmodel *m, const pview *t, const int64_t *index, pval *out);

/* ---- views (prog_views.c): no values, only view arithmetic ---- */
/** dim wrapped into [0, ndim) (a 0-d tensor takes 0 and -1), or -1. */
int pr_wrap_dim(int dim, int ndim);
int pr_narrow(const pview *in, int dim, int64_t start, int64_t length, pview *out);
int pr_select(const pview *in, int dim, int64_t index, pview *out);
int pr_slice(const pview *in, int dim, int64_t start, int64_t end, int64_t step, pview *out);
int pr_transpose(const pview *in, int d0, int d1, pview *out);
/** dims [in->ndim]. */
int pr_permute(const pview *in, const int *dims, pview *out);
int pr_expand(const pview *in, int ndim, const int64_t *sizes, pview *out);
int pr_unfold(const pview *in, int dim, int64_t size, int64_t step, pview *out);
int pr_as_strided(const pmodel *m, const pview *in, int ndim, const int64_t *sizes, const int64_t *strides,
                  int64_t off, pview *out);
int pr_unsqueeze(const pview *in, int dim, pview *out);
int pr_squeeze_dim(const pview *in, int dim, pview *out);
/** kiln_view/kiln_reshape's sizes (one -1 inferred) into out->size; the
 *  view's strides, or *copy when no view can express it. */
int pr_view(const pview *in, int ndim, const int64_t *sizes, pview *out, bool *copy);

#endif /* KILN_FUZZ_PROG_REF_H */
