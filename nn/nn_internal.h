/*
 * nn_internal.h — what the files of the layers and optimizers (nn/)
 * share: dtype helpers of the layers and losses, and the optimizer state
 * accessor the tests use.
 */
#ifndef KILN_NN_INTERNAL_H
#define KILN_NN_INTERNAL_H

#include "autograd.h"
#include "io_internal.h"

/* ---- softmax_layer_norm.c ---- */

/** t converted to its compute dtype (F32 for F16/BF16), or t itself
 *  (softmax_layer_norm.c; shared by the layers and losses). New reference. */
kiln_tensor *nn_widen(kiln_tensor *t);
/** t has a float dtype; else KILN_ERR_DTYPE "<arg> needs a float dtype,
 *  got ..." and false (softmax_layer_norm.c). */
bool nn_check_float(const kiln_tensor *t, const char *fn, const char *arg);

/* ---- loss.c ---- */

/** r is KILN_REDUCTION_NONE, _MEAN or _SUM; else KILN_ERR_ARG and false. */
bool nn_check_reduction(kiln_reduction r, const char *fn);
/** loss reduced as asked over all dims (none: loss itself), rounded to
 *  dtype. New reference (scope-owned as any op's result). */
kiln_tensor *nn_reduce(kiln_tensor *loss, kiln_reduction r, kiln_dtype dtype);
/** input and target (named a_name, b_name in messages) have float dtypes,
 *  the same dtype (else KILN_ERR_DTYPE) and the same sizes (else
 *  KILN_ERR_SHAPE); false with the error set. */
bool nn_check_pair(const kiln_tensor *input, const kiln_tensor *target, const char *a_name, const char *b_name,
                   const char *fn);

/* ---- adaptive_pool.c ---- */

/** x's slices idx [n] (host values, checked by kiln_index_select) along
 *  dim: a gather whose gradient is a scatter-add. New tracked reference
 *  or NULL with the error set. */
kiln_tensor *nn_take(kiln_tensor *x, int dim, int64_t n, const int64_t *idx, const char *fn);

/* ---- optim.c ---- */

/** Parameter j's state buffer k (SGD: 0 momentum_buffer; Adam: 0 exp_avg,
 *  1 exp_avg_sq; RMSprop: 0 square_avg, then momentum_buffer, grad_avg
 *  when it has them; Adagrad: 0 sum), borrowed; NULL before the first step or out of range.
 *  For tests and tools that force or inspect the state. */
kiln_tensor *nn_optimizer_state(const kiln_optimizer *opt, int j, int k);

#endif /* KILN_NN_INTERNAL_H */
