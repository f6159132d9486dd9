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

/* ---- optim.c ---- */

/** Parameter j's state buffer k (SGD: 0 momentum_buffer; Adam: 0 exp_avg,
 *  1 exp_avg_sq), borrowed; NULL before the first step or out of range.
 *  For tests and tools that force or inspect the state. */
kiln_tensor *nn_optimizer_state(const kiln_optimizer *opt, int j, int k);

#endif /* KILN_NN_INTERNAL_H */
