/*
 * ops_loss.c — ONNX's NegativeLogLikelihoodLoss and
 * SoftmaxCrossEntropyLoss (opsets 12 to 18) composed of Kiln ops.
 *
 * input [N, C, d1..dk] (log-probabilities, or scores that LogSoftmax over
 * axis 1 turns into them), target [N, d1..dk] (class indices), optional
 * weight [C]. Each position's loss is -input[n, target, d...] times the
 * target class's weight (1 without weights), 0 where target equals
 * ignore_index; reduction "none" keeps them, "sum" adds them, "mean"
 * (the default) divides the sum by the sum of the weights that were used
 * (the count of positions not ignored, without weights). As ONNX's
 * reference (onnx/backend/test/case/node/negativeloglikelihoodloss.py).
 */
#include <string.h>

#include "onnx_internal.h"

#define OP(name) static int op_##name(onnx_ctx *c, kiln_tensor **in, int n_in, kiln_tensor **out, int n_out)
#define UNUSED_ARGS (void)c, (void)n_in, (void)n_out

static kiln_tensor *nll(onnx_ctx *c, kiln_tensor *logp, kiln_tensor *target, kiln_tensor *weight, int *rc) {
  char red[16];
  onnx_attr_string(c, "reduction", "mean", red, sizeof red);
  bool none = strcmp(red, "none") == 0, sum = strcmp(red, "sum") == 0;
  if (!none && !sum && strcmp(red, "mean") != 0) {
    *rc = onnx_fail(c, KILN_ERR_ARG, "reduction '%s'", red);
    return NULL;
  }
  if (kiln_dim(logp) < 2 || kiln_dim(target) != kiln_dim(logp) - 1) {
    *rc = onnx_fail(c, KILN_ERR_SHAPE, "input rank %d, target rank %d", kiln_dim(logp), kiln_dim(target));
    return NULL;
  }
  kiln_tensor *t = kiln_to_dtype(target, KILN_I64), *mask = NULL;
  if (onnx_attr(c, "ignore_index")) {
    mask = kiln_ne_scalar(t, (double)onnx_attr_int(c, "ignore_index", 0));
    t = kiln_where(mask, t, kiln_zeros_like(t));
  }
  kiln_tensor *picked = kiln_squeeze_dim(kiln_gather(logp, 1, kiln_unsqueeze(t, 1)), 1);
  kiln_dtype d = kiln_dtype_of(logp);
  kiln_tensor *w = NULL;
  if (weight) {
    int64_t n = kiln_numel(t);
    w = kiln_reshape(kiln_index_select(weight, 0, kiln_reshape(t, 1, &n)), kiln_dim(t), kiln_sizes(t));
  }
  if (mask) w = w ? kiln_mul(w, kiln_to_dtype(mask, d)) : kiln_to_dtype(mask, d);
  kiln_tensor *loss = kiln_neg(w ? kiln_mul(picked, w) : picked);
  *rc = KILN_OK;
  if (none) return loss;
  kiln_tensor *total = kiln_sum(loss, 0, NULL, false);
  if (sum) return total;
  return w ? kiln_div(total, kiln_sum(w, 0, NULL, false)) : kiln_div_scalar(total, (double)kiln_numel(picked));
}

OP(NegativeLogLikelihoodLoss) {
  UNUSED_ARGS;
  int rc;
  kiln_tensor *r = nll(c, in[0], in[1], n_in > 2 ? in[2] : NULL, &rc);
  return rc < 0 ? rc : onnx_set(out, r);
}

OP(SoftmaxCrossEntropyLoss) {
  UNUSED_ARGS;
  int rc;
  kiln_tensor *logp = kiln_log_softmax(in[0], 1);
  if (!logp) return onnx_status();
  kiln_tensor *r = nll(c, logp, in[1], n_in > 2 ? in[2] : NULL, &rc);
  if (rc < 0) return rc;
  if (n_out > 1) out[1] = logp;
  return onnx_set(out, r);
}

const onnx_op onnx_ops_loss[] = {
    {"NegativeLogLikelihoodLoss", op_NegativeLogLikelihoodLoss, 2, 3, 1, 1},
    {"SoftmaxCrossEntropyLoss", op_SoftmaxCrossEntropyLoss, 2, 3, 1, 2},
    {NULL, NULL, 0, 0, 0, 0},
};
