/*
 * kiln/nn.h — neural-network layers and losses with Torch's semantics
 * (torch.nn.functional): linear, embedding, dropout, activations, losses,
 * convolution, pooling, padding and batch norm. Included by kiln/kiln.h
 * (which defines the types used here); docs/api.md has their sections.
 */
#ifndef KILN_NN_H
#define KILN_NN_H

#ifdef __cplusplus
extern "C" {
#endif

/* -------------------------------- torch.nn.functional: layers and losses
 * nn/functional.c and nn/loss.c. Composed lazily from the ops above,
 * so they fuse with their neighbours and kiln_grad differentiates them
 * (w.r.t. every float tensor argument). Inputs may have any strides.
 * Float dtypes (F32, F64; F16/BF16 compute in F32 and round once) unless
 * a function says otherwise: BOOL and integer inputs are KILN_ERR_DTYPE.
 * Each returns a new reference (contiguous unless said) or NULL with the
 * error set (messages name the function); a NULL argument returns NULL
 * and keeps the first error. Tensor arguments are borrowed. */

/** x > 0 ? x : x * negative_slope, elementwise. t's sizes and dtype.
 *  Torch: nn.functional.leaky_relu(t, negative_slope). */
KILN_API kiln_tensor *kiln_leaky_relu(kiln_tensor *t, double negative_slope);
/** x > 0 ? x : alpha * (exp(x) - 1), elementwise (expm1; the gradient at
 *  x == 0 is alpha, as Torch). Torch: nn.functional.elu(t, alpha). */
KILN_API kiln_tensor *kiln_elu(kiln_tensor *t, double alpha);
/** scale * elu(x, alpha) with Torch's constants alpha = 1.6732632423543772,
 *  scale = 1.0507009873554805. Torch: nn.functional.selu. */
KILN_API kiln_tensor *kiln_selu(kiln_tensor *t);
/** x * beta > threshold ? x : log1p(exp(x * beta)) / beta, elementwise.
 *  Torch: nn.functional.softplus(t, beta, threshold) (defaults 1, 20). */
KILN_API kiln_tensor *kiln_softplus(kiln_tensor *t, double beta, double threshold);
/** x / (1 + |x|), elementwise. Torch: nn.functional.softsign (which also
 *  takes integers; Kiln: KILN_ERR_DTYPE). */
KILN_API kiln_tensor *kiln_softsign(kiln_tensor *t);
/** x > 0 ? x : w * x with one weight per channel: t [N, C, ...] (channel
 *  dim 1; a 0-d or 1-D t is one channel) and weight [C], or one weight
 *  for all (weight [1] or 0-d). weight has t's dtype. Result t's sizes
 *  and dtype. Errors: weight of more than 1 dim or of another element count
 *  (KILN_ERR_SHAPE); dtypes differ (KILN_ERR_DTYPE). Torch:
 *  nn.functional.prelu(t, weight). */
KILN_API kiln_tensor *kiln_prelu(kiln_tensor *t, kiln_tensor *weight);
/** Gated linear unit: t split in halves a, b along dim, a * sigmoid(b):
 *  t's sizes with dim halved. Errors: bad dim (KILN_ERR_ARG), 0-d t or an
 *  odd size along dim (KILN_ERR_SHAPE). Torch: nn.functional.glu(t, dim). */
KILN_API kiln_tensor *kiln_glu(kiln_tensor *t, int dim);
/** [*, C*r^2, H, W] -> [*, C, H*r, W*r], r = upscale_factor: out[.., c, h*r
 *  + i, w*r + j] = t[.., c*r^2 + i*r + j, h, w]. Views and one lazy copy
 *  (none when r == 1: then a view of t). Any dtype. Errors: fewer than 3
 *  dims or channels not divisible by r^2 (KILN_ERR_SHAPE), r <= 0
 *  (KILN_ERR_ARG). Torch: nn.functional.pixel_shuffle(t, r). */
KILN_API kiln_tensor *kiln_pixel_shuffle(kiln_tensor *t, int64_t upscale_factor);
/** Rows of weight [V, D] (any dtype) at indices (I64 or I32, any sizes):
 *  [*indices sizes, D], weight's dtype: one gather that fuses into its
 *  readers; its gradient w.r.t. weight is a scatter-add (duplicates
 *  accumulate). The indices are forced now and checked: a value outside
 *  [0, V) is KILN_ERR_INDEX ("index 7 is out of range for dim 0 of size
 *  5") and nothing is recorded. Errors: weight not 2-D (KILN_ERR_SHAPE),
 *  other index dtypes (KILN_ERR_DTYPE). Torch: nn.functional.embedding(
 *  indices, weight) — note the argument order is weight first. */
KILN_API kiln_tensor *kiln_embedding(kiln_tensor *weight, kiln_tensor *indices);
/** input [*, in] @ weight^T + bias: weight [out, in] is read transposed as
 *  a view (a BLAS transpose flag, no copy); the leading dims of input are
 *  one GEMM of [N, in] (a copy only when input's layout cannot be viewed
 *  so); bias [out] (or [1], 0-d; may be NULL) is added in the GEMM's
 *  epilogue kernel. Result [*, out] (input 1-D [in]: [out]), input's
 *  dtype. input, weight and bias have one float dtype (else
 *  KILN_ERR_DTYPE); F16/BF16 are an F32 GEMM and bias, rounded once. Errors: weight not 2-D, input's last size not in,
 *  bias of other sizes (KILN_ERR_SHAPE). Torch: nn.functional.linear. */
KILN_API kiln_tensor *kiln_linear(kiln_tensor *input, kiln_tensor *weight, kiln_tensor *bias);

/** How a loss reduces its per-element values: none (the values, the
 *  target's sizes), their mean, or their sum (0-d). Torch's reduction=
 *  'none' / 'mean' / 'sum'. */
typedef enum kiln_reduction { KILN_REDUCTION_NONE = 0, KILN_REDUCTION_MEAN = 1, KILN_REDUCTION_SUM = 2 } kiln_reduction;

/** Cross entropy of raw scores against class indices: log_softmax over
 *  the class dim then nll, with label smoothing e in [0, 1] (Torch's
 *  formula: (1 - e) * nll + e / C * -sum_c log_softmax_c). logits [N, C],
 *  [N, C, d1, ...] (class dim 1) or [C] (unbatched); target I64 [N],
 *  [N, d1, ...] or 0-d. Class probabilities as target, class weights and
 *  ignore_index are not supported. Mean divides by the number of targets
 *  (an empty batch gives NaN, as Torch). The per-target losses are one
 *  row kernel (row max, row sums, the target's score): log_softmax is
 *  never written out. Result: 0-d, or target's sizes
 *  for KILN_REDUCTION_NONE; logits' dtype. The target is forced and
 *  checked now: a class outside [0, C) is KILN_ERR_INDEX, nothing is
 *  recorded. Errors: 0-d logits or target sizes that do not match
 *  (KILN_ERR_SHAPE), target not I64 or logits not float (KILN_ERR_DTYPE),
 *  label_smoothing outside [0, 1] or an unknown reduction (KILN_ERR_ARG).
 *  Torch: nn.functional.cross_entropy(logits, target, reduction=...,
 *  label_smoothing=...). */
KILN_API kiln_tensor *kiln_cross_entropy(kiln_tensor *logits, kiln_tensor *target, kiln_reduction reduction,
                                         double label_smoothing);
/** Negative log likelihood: -log_probs[target] along the class dim (a
 *  gather), reduced. Shapes, dtypes, checks and errors as
 *  kiln_cross_entropy (without label smoothing). Torch:
 *  nn.functional.nll_loss(log_probs, target, reduction=...). */
KILN_API kiln_tensor *kiln_nll_loss(kiln_tensor *log_probs, kiln_tensor *target, kiln_reduction reduction);
/** (input - target)^2, reduced. input and target have the same sizes and
 *  float dtype (Torch broadcasts other sizes with a warning; Kiln:
 *  KILN_ERR_SHAPE; other dtypes: KILN_ERR_DTYPE). Torch:
 *  nn.functional.mse_loss(input, target, reduction=...). */
KILN_API kiln_tensor *kiln_mse_loss(kiln_tensor *input, kiln_tensor *target, kiln_reduction reduction);
/** In training with 0 < p < 1: each element kept with probability 1 - p
 *  and scaled by 1 / (1 - p) (Torch's input * bernoulli(1 - p) / (1 - p)),
 *  else 0. The mask is drawn now from Kiln's generator (kiln_manual_seed
 *  makes it reproducible; the values differ from Torch's); input stays
 *  lazy. p == 1 gives input * 0 (zeros; NaN/inf give NaN), as Torch. With
 *  !training or p == 0: the identity, a new reference to input itself.
 *  Errors: p outside [0, 1] or NaN (KILN_ERR_ARG), non-float input
 *  (KILN_ERR_DTYPE). Torch: nn.functional.dropout(input, p, training). */
KILN_API kiln_tensor *kiln_dropout(kiln_tensor *input, double p, bool training);

/* ---------------------------------------------- convolutional layers
 * Torch 1.13's nn.functional.pad, max_pool{1,2,3}d, avg_pool{1,2,3}d and
 * batch_norm, composed from lazy graph ops (window views of the input's
 * storage, gathers with host-computed indices, reductions, where), so they
 * fuse like any other op and kiln_grad differentiates them through the
 * ops' own rules. Pools take nd = 1, 2 or 3 spatial dims and per-dim
 * arrays of nd entries (dim order: outermost spatial dim first, as
 * Torch's kernel_size tuples); the input is [N, C, *spatial] or, without
 * the batch dim, [C, *spatial] (the result then has no batch dim either).
 * Float dtypes only for the pools and batch_norm (integer and bool
 * inputs: KILN_ERR_DTYPE); F16/BF16 pools and norms compute in F32 and
 * round once. Lazy: new reference, contiguous, or NULL with the first
 * error kept (messages name the function and the values). */

/** Padding modes of kiln_pad (Torch: mode="constant", "reflect",
 *  "replicate", "circular"). */
typedef enum kiln_pad_mode {
  KILN_PAD_CONSTANT = 0,
  KILN_PAD_REFLECT = 1,
  KILN_PAD_REPLICATE = 2,
  KILN_PAD_CIRCULAR = 3,
} kiln_pad_mode;

/** input padded in its last n_pad / 2 dims: pad [n_pad] in Torch's order,
 *  last dim first: (left, right) of the last dim, then (top, bottom) of
 *  the one before, ... Output size of a padded dim: size + left + right.
 *  KILN_PAD_CONSTANT fills with value (converted to input's dtype, any
 *  dtype); a negative pad crops (to any size >= 0 when no pad is
 *  positive, else every padded dim must stay non-empty, as Torch). KILN_PAD_REFLECT mirrors without repeating the edge (each
 *  pad < the dim's size), KILN_PAD_REPLICATE repeats the edge element,
 *  KILN_PAD_CIRCULAR wraps around (each pad <= the size; negative pads
 *  crop first, the rest wraps within what is left). The three non-constant
 *  modes take 2, 4 or 6 pads of an input with one or two more dims
 *  (circular: exactly two more, [N, C, *padded]) and value 0; reflect
 *  and replicate need non-empty dims after the first and, as Torch 1.13,
 *  a non-empty output (1 padded dim) or one non-empty padded dim (2, 3). Any dtype, any strides. One gather kernel (its
 *  gradient a scatter-add). Errors: KILN_ERR_ARG for an odd n_pad, more
 *  pads than dims, a NULL pad, a value in a non-constant mode, a reflect
 *  pad >= size or circular pad > size, an unknown mode;
 *  KILN_ERR_UNSUPPORTED for a rank the non-constant modes do not take;
 *  KILN_ERR_SHAPE for a negative output size or an empty one (above).
 *  Borrows input. Torch: nn.functional.pad(input, pad, mode, value). */
KILN_API kiln_tensor *kiln_pad(kiln_tensor *input, int n_pad, const int64_t *pad, kiln_pad_mode mode, double value);

/** Max pooling over nd spatial dims: out[n, c, o] = max over the window
 *  o * stride - padding + k * dilation (k < kernel, per dim), the padding
 *  implicit -inf. Output size per dim: floor (ceil with ceil_mode) of
 *  (size + 2 padding - dilation (kernel - 1) - 1) / stride, plus 1; in
 *  ceil_mode a last window that would start in the right padding is
 *  dropped (Torch's rule). stride NULL means kernel; padding NULL means 0;
 *  dilation NULL means 1. A NaN in a window gives NaN; a zero maximum
 *  keeps its sign. The gradient goes to one element per window, the one
 *  Torch picks: the first maximum in window scan order (row-major over
 *  the kernel dims), or the last NaN; never padding unless the window
 *  holds padding only (dilation: -inf, no gradient reaches the input).
 *  Result [N, C, *out] (or
 *  [C, *out]), input's dtype. Errors: KILN_ERR_ARG for nd outside [1, 3],
 *  a NULL kernel, kernel, stride or dilation < 1, padding < 0 or >
 *  kernel / 2; KILN_ERR_SHAPE for a rank other than nd + 1 or nd + 2, an
 *  empty channel or spatial dim, or an output size < 1 (the kernel larger
 *  than the padded input); KILN_ERR_DTYPE for non-float input. Borrows
 *  input. Torch: nn.functional.max_pool{nd}d(input, kernel, stride,
 *  padding, dilation, ceil_mode). */
KILN_API kiln_tensor *kiln_max_pool(kiln_tensor *input, int nd, const int64_t *kernel, const int64_t *stride,
                                    const int64_t *padding, const int64_t *dilation, bool ceil_mode);

/** Average pooling over nd spatial dims: the sum of the window (zero
 *  padding) divided by, with count_include_pad, the number of window
 *  positions inside the padded input (in ceil_mode a window hanging past
 *  the right padding counts only the part inside it, as Torch), else the
 *  number inside the input. Output sizes as kiln_max_pool (dilation 1).
 *  stride NULL means kernel; padding NULL means 0. Result [N, C, *out] (or
 *  [C, *out]), input's dtype. Errors as kiln_max_pool. Borrows input.
 *  Torch: nn.functional.avg_pool{nd}d(input, kernel, stride, padding,
 *  ceil_mode, count_include_pad) (divisor_override None). */
KILN_API kiln_tensor *kiln_avg_pool(kiln_tensor *input, int nd, const int64_t *kernel, const int64_t *stride,
                                    const int64_t *padding, bool ceil_mode, bool count_include_pad);

/** Batch normalization of input [N, C, *] per channel c:
 *  (x - mean_c) / sqrt(var_c + eps) * weight[c] + bias[c]. training: mean
 *  and the biased variance over every dim but 1, and running_mean /
 *  running_var (when given) are updated in place, lazily, through their
 *  views: r = (1 - momentum) r + momentum s, s the batch mean and the
 *  unbiased variance; the update is detached (no gradient reaches the
 *  running stats, and gradients never flow from them). Not training: the
 *  running stats normalize (both required). weight, bias, running_mean,
 *  running_var may be NULL (training), else hold C elements (any shape
 *  with C elements, as Torch). Result: input's sizes and dtype,
 *  contiguous. Gradients w.r.t. input, weight and bias. Errors:
 *  KILN_ERR_SHAPE for input with fewer than 2 dims, a parameter without C
 *  elements, or training with one value per channel; KILN_ERR_ARG for
 *  missing running stats when not training, a non-finite eps or
 *  momentum, or running stats that repeat an element; KILN_ERR_DTYPE for
 *  non-float tensors. Borrows every argument. Torch:
 *  nn.functional.batch_norm(input, running_mean, running_var, weight,
 *  bias, training, momentum, eps). */
KILN_API kiln_tensor *kiln_batch_norm(kiln_tensor *input, kiln_tensor *running_mean, kiln_tensor *running_var,
                                      kiln_tensor *weight, kiln_tensor *bias, bool training, double momentum,
                                      double eps);

#ifdef __cplusplus
}
#endif
#endif /* KILN_NN_H */
