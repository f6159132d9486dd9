/*
 * kiln/nn.h — neural-network layers and losses with Torch's semantics
 * (torch.nn.functional): linear, embedding, dropout, activations, losses,
 * convolution, pooling (adaptive too), interpolation, padding, batch,
 * group, instance and RMS norm, and scaled dot-product attention.
 * Included by kiln/kiln.h (which defines the types used here);
 * docs/api.md has their sections.
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
 *  epilogue: before its stores on the generated GEMM (with an activation
 *  applied to the result too: one kernel), else one epilogue kernel. Result [*, out] (input 1-D [in]: [out]), input's
 *  dtype. input, weight and bias have one float dtype (else
 *  KILN_ERR_DTYPE); F16/BF16 are an F32 GEMM and bias, rounded once. Errors: weight not 2-D, input's last size not in,
 *  bias of other sizes (KILN_ERR_SHAPE). Torch: nn.functional.linear. */
KILN_API kiln_tensor *kiln_linear(kiln_tensor *input, kiln_tensor *weight, kiln_tensor *bias);

/** How a loss reduces its per-element values: none (the values, the
 *  target's sizes), their mean, or their sum (0-d); batchmean (kl_div
 *  only) the sum divided by the size of dim 0. Torch's reduction=
 *  'none' / 'mean' / 'sum' / 'batchmean'. */
typedef enum kiln_reduction {
  KILN_REDUCTION_NONE = 0,
  KILN_REDUCTION_MEAN = 1,
  KILN_REDUCTION_SUM = 2,
  KILN_REDUCTION_BATCHMEAN = 3,
} kiln_reduction;

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
/* The pointwise losses below (nn/loss_pointwise.c) take input and target
 * of the same sizes and one float dtype (other sizes: KILN_ERR_SHAPE,
 * where Torch broadcasts some with a warning; other dtypes:
 * KILN_ERR_DTYPE), compute the per-element loss in the compute dtype
 * (F32 for F16/BF16) and reduce it as asked (KILN_REDUCTION_NONE: input's
 * sizes; else 0-d), in input's dtype; an unknown reduction is
 * KILN_ERR_ARG. Differentiable w.r.t. input and target (and the weights). */

/** -weight * (t * log(x) + (1 - t) * log(1 - x)), each log clamped to
 *  >= -100 as Torch (so x == 0 or 1 gives a finite loss; the clamped
 *  side's gradient is 0, where Torch divides by max(x (1 - x), 1e-12)).
 *  input x holds probabilities in [0, 1]: unlike Torch, which checks them
 *  when it runs, Kiln stays lazy and a value outside gives NaN. weight
 *  (may be NULL) is a float tensor that broadcasts to input's sizes
 *  without growing them (else KILN_ERR_SHAPE). Torch:
 *  nn.functional.binary_cross_entropy(input, target, weight, reduction=). */
KILN_API kiln_tensor *kiln_binary_cross_entropy(kiln_tensor *input, kiln_tensor *target, kiln_tensor *weight,
                                                kiln_reduction reduction);
/** weight * ((1 - t) x + (1 + (pos_weight - 1) t) log(1 + exp(-x))) of
 *  raw scores x, stable for every x (log(1 + exp(-x)) is never
 *  overflowed: log1p(exp(-x)) for x > 0, log1p(exp(x)) - x else; the
 *  gradient is sigmoid(x)'s, exact at x == 0 too). weight and pos_weight
 *  (may be NULL; pos_weight typically [C], the last dim) broadcast to
 *  input's sizes as kiln_binary_cross_entropy's weight. Torch:
 *  nn.functional.binary_cross_entropy_with_logits(input, target, weight,
 *  reduction=, pos_weight=). */
KILN_API kiln_tensor *kiln_binary_cross_entropy_with_logits(kiln_tensor *input, kiln_tensor *target,
                                                            kiln_tensor *weight, kiln_tensor *pos_weight,
                                                            kiln_reduction reduction);
/** |input - target| (gradient sign(d): 0 at d == 0, as Torch). Torch:
 *  nn.functional.l1_loss(input, target, reduction=). */
KILN_API kiln_tensor *kiln_l1_loss(kiln_tensor *input, kiln_tensor *target, kiln_reduction reduction);
/** |d| < beta ? d^2 / (2 beta) : |d| - beta / 2, d = input - target;
 *  beta == 0 is kiln_l1_loss. Errors: beta < 0, NaN or inf (KILN_ERR_ARG).
 *  Torch: nn.functional.smooth_l1_loss(input, target, reduction=, beta=). */
KILN_API kiln_tensor *kiln_smooth_l1_loss(kiln_tensor *input, kiln_tensor *target, kiln_reduction reduction,
                                          double beta);
/** |d| < delta ? d^2 / 2 : delta (|d| - delta / 2), d = input - target.
 *  Errors: delta <= 0, NaN or inf (KILN_ERR_ARG). Torch:
 *  nn.functional.huber_loss(input, target, reduction=, delta=). */
KILN_API kiln_tensor *kiln_huber_loss(kiln_tensor *input, kiln_tensor *target, kiln_reduction reduction,
                                      double delta);
/** Kullback-Leibler divergence of log-probabilities input from target:
 *  t (log t - input) with 0 where t == 0 (Torch's xlogy), or, with
 *  log_target, exp(t) (t - input). KILN_REDUCTION_BATCHMEAN (Torch's
 *  recommended 'batchmean') divides the sum by input's size of dim 0 (1
 *  for a 0-d input); _MEAN divides by the element count. Torch:
 *  nn.functional.kl_div(input, target, reduction=, log_target=). */
KILN_API kiln_tensor *kiln_kl_div(kiln_tensor *input, kiln_tensor *target, kiln_reduction reduction,
                                  bool log_target);
/** In training with 0 < p < 1: each element kept with probability 1 - p
 *  and scaled by 1 / (1 - p) (Torch's input * bernoulli(1 - p) / (1 - p)),
 *  else 0. The mask is drawn now from Kiln's generator (kiln_manual_seed
 *  makes it reproducible; the values differ from Torch's); input stays
 *  lazy. p == 1 gives input * 0 (zeros; NaN/inf give NaN), as Torch. With
 *  !training or p == 0: the identity, a new reference to input itself.
 *  Errors: p outside [0, 1] or NaN (KILN_ERR_ARG), non-float input
 *  (KILN_ERR_DTYPE). Torch: nn.functional.dropout(input, p, training). */
KILN_API kiln_tensor *kiln_dropout(kiln_tensor *input, double p, bool training);

/* ------------------------------------------------------- transformers
 * nn/attention.c, nn/functional.c (gelu's tanh form) and
 * nn/softmax_layer_norm.c (RMS norm): the parts of a transformer block
 * that the ops above lack, composed the same way (lazy, fused, and
 * differentiable through kiln_grad). Multi-head attention is a
 * composition of kiln_linear, views and this attention
 * (examples/char_transformer.c); positional embeddings are
 * kiln_embedding of positions; weight tying is one parameter passed to
 * kiln_embedding and kiln_linear (kiln_grad sums both uses). */

/** 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))), elementwise: the
 *  tanh approximation of GELU (kiln_gelu is the exact erf form). t's
 *  sizes and dtype; float dtypes (else KILN_ERR_DTYPE). Torch:
 *  nn.functional.gelu(t, approximate='tanh'). */
KILN_API kiln_tensor *kiln_gelu_tanh(kiln_tensor *t);
/** Root-mean-square normalization over the last normalized_ndim dims of
 *  t: t * rsqrt(mean(t^2) + eps) * weight. weight (may be NULL: no
 *  scale) has exactly the normalized sizes (t [..., N1, N2] with
 *  normalized_ndim 2: weight [N1, N2]). Result: t's sizes, contiguous,
 *  t's dtype promoted with weight's. One row kernel. Errors:
 *  KILN_ERR_ARG (normalized_ndim outside [1, ndim], eps < 0 or not
 *  finite), KILN_ERR_SHAPE (weight of other sizes), KILN_ERR_DTYPE
 *  (non-float t or weight). Borrows weight. Torch 2.4:
 *  nn.functional.rms_norm(t, t.shape[-normalized_ndim:], weight, eps)
 *  (whose eps=None is torch.finfo(t.dtype).eps: pass it explicitly). */
KILN_API kiln_tensor *kiln_rms_norm(kiln_tensor *t, int normalized_ndim, kiln_tensor *weight, double eps);

/** softmax(q·kᵀ·scale + mask)·v. q [..., L, E], k [..., S, E], v [..., S, Ev]
 * -> [..., L, Ev]; batch dims broadcast. mask NULL, BOOL (true = keep) or
 * float (added), broadcastable to [..., L, S]; is_causal keeps j <= i;
 * scale 0 means 1/sqrt(E); dropout_p in [0, 1) uses Kiln's generator.
 * Errors: shapes, dtypes, mask with is_causal. New reference.
 *
 *  In full: scaled dot-product attention with Torch 2's semantics, composed as
 *  matmul -> scale -> mask -> softmax(-1) -> (dropout) -> matmul (the
 *  pattern the attention lowering looks for). q, k, v have one float
 *  dtype (F16/BF16 compute in F32 and round once); the batch dims (all
 *  but the last two) of q, k and v broadcast together, and the result
 *  has their broadcast as batch dims. attn_mask (may be NULL) is BOOL
 *  (true = take part; a row with nothing kept gives NaN, as Torch) or of
 *  q's dtype (added to the scores, differentiable), and broadcasts to
 *  [batch..., L, S] without growing it. is_causal keeps key j for query
 *  i when j <= i (top-left aligned, Torch's tril of ones(L, S)); that
 *  mask is a lazy comparison of positions that fuses into the softmax's
 *  kernel: it allocates nothing. dropout_p > 0 drops attention weights
 *  as kiln_dropout(p, dropout_p, training = true) (always on, as
 *  Torch's function: pass 0 in evaluation). Differentiable w.r.t. q, k,
 *  v and a float mask. Errors: KILN_ERR_SHAPE (q, k or v with fewer than
 *  2 dims, E or S not matching, batch dims or mask not broadcasting),
 *  KILN_ERR_DTYPE (non-float q, dtypes differ, a mask neither BOOL nor
 *  q's dtype), KILN_ERR_ARG (attn_mask with is_causal, dropout_p outside
 *  [0, 1), a non-finite scale). Borrows its arguments. Torch 2:
 *  nn.functional.scaled_dot_product_attention(q, k, v, attn_mask,
 *  dropout_p, is_causal, scale=None if scale == 0 else scale). */
KILN_API kiln_tensor *kiln_scaled_dot_product_attention(kiln_tensor *q, kiln_tensor *k, kiln_tensor *v,
                                                        kiln_tensor *attn_mask, double dropout_p, bool is_causal,
                                                        double scale);

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

/** Adaptive average pooling over nd = 1, 2 or 3 spatial dims to
 *  output_size [nd] (each >= 1): output o of a dim of input size in
 *  averages the window [floor(o * in / out), ceil((o + 1) * in / out))
 *  (Torch's formula; windows may overlap and differ in length), over the
 *  box of the nd windows. input [N, C, *in] or [C, *in]; result [N, C,
 *  *output_size] (or [C, ...]), input's dtype (F16/BF16 compute in F32).
 *  Each dim is one gather of its windows' taps (host-computed indices)
 *  and a reduction; the gradient is a scatter-add. Errors: KILN_ERR_ARG
 *  (nd outside [1, 3], NULL output_size, an output size < 1),
 *  KILN_ERR_SHAPE (rank not nd + 1 or nd + 2, an empty channel or
 *  spatial dim), KILN_ERR_DTYPE (non-float input). Borrows input. Torch:
 *  nn.functional.adaptive_avg_pool{nd}d(input, output_size). */
KILN_API kiln_tensor *kiln_adaptive_avg_pool(kiln_tensor *input, int nd, const int64_t *output_size);
/** Adaptive max pooling: the maximum over each of kiln_adaptive_avg_pool's
 *  windows (NaN propagates). The gradient goes to the maximum; among
 *  equal maxima it is split evenly (Torch sends it to the first). Shapes,
 *  dtypes and errors as kiln_adaptive_avg_pool. Torch:
 *  nn.functional.adaptive_max_pool{nd}d(input, output_size) (without
 *  return_indices). */
KILN_API kiln_tensor *kiln_adaptive_max_pool(kiln_tensor *input, int nd, const int64_t *output_size);

/** Interpolation modes of kiln_interpolate: Torch's mode="nearest" and
 *  "linear" / "bilinear" / "trilinear" (by the number of spatial dims). */
typedef enum kiln_interp_mode { KILN_INTERP_NEAREST = 0, KILN_INTERP_LINEAR = 1 } kiln_interp_mode;

/** Resizes the nd = 1, 2 or 3 spatial dims of input [N, C, *in] to size
 *  [nd], or to floor(in * scale_factor[i]) (then the source coordinates
 *  use 1 / scale_factor, Torch's recompute_scale_factor=None): exactly
 *  one of size and scale_factor is non-NULL. KILN_INTERP_NEAREST takes
 *  source pixel min(floor(dst * scale), in - 1), scale = in / out, in
 *  float as Torch; KILN_INTERP_LINEAR blends the two neighbours of src =
 *  dst * (in - 1) / (out - 1) with align_corners, else max((dst + 0.5) *
 *  scale - 0.5, 0), dim by dim. Result [N, C, *out], input's dtype
 *  (F16/BF16 compute in F32), differentiable w.r.t. input (a
 *  scatter-add). Errors: KILN_ERR_ARG (nd outside [1, 3], both or
 *  neither of size and scale_factor, a scale factor <= 0 or not finite,
 *  an unknown mode, align_corners with nearest), KILN_ERR_SHAPE (rank not
 *  nd + 2, an empty spatial dim or output size < 1), KILN_ERR_DTYPE
 *  (non-float input). Borrows input. Torch: nn.functional.interpolate(
 *  input, size, scale_factor, mode, align_corners). */
KILN_API kiln_tensor *kiln_interpolate(kiln_tensor *input, int nd, const int64_t *size, const double *scale_factor,
                                       kiln_interp_mode mode, bool align_corners);

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

/** Group normalization of input [N, C, *]: the channels split into
 *  num_groups groups of C / num_groups, each (sample, group) normalized
 *  over its channels and spatial elements, (x - mean) / sqrt(var + eps)
 *  with the biased variance, then y * weight[c] + bias[c] per channel.
 *  weight, bias: [C] float tensors, or NULL. Result: input's sizes and
 *  dtype, contiguous (F16/BF16 compute in F32). Gradients w.r.t. input,
 *  weight and bias. Errors: KILN_ERR_SHAPE (input with fewer than 2 dims,
 *  weight or bias not [C]), KILN_ERR_ARG (num_groups < 1 or not dividing
 *  C, eps < 0 or not finite), KILN_ERR_DTYPE (non-float tensors).
 *  Borrows every argument. Torch: nn.functional.group_norm(input,
 *  num_groups, weight, bias, eps). */
KILN_API kiln_tensor *kiln_group_norm(kiln_tensor *input, int64_t num_groups, kiln_tensor *weight,
                                      kiln_tensor *bias, double eps);
/** Instance normalization of input [N, C, *spatial] (at least one spatial
 *  dim): each (sample, channel) normalized over its spatial elements (the
 *  biased variance), then scaled and shifted per channel by weight and
 *  bias ([C] or NULL): kiln_group_norm with C groups. Statistics always
 *  come from the input (Torch's use_input_stats=True without running
 *  stats). Errors as kiln_group_norm, and KILN_ERR_SHAPE for input with
 *  fewer than 3 dims or one spatial element per channel (Torch: "Expected
 *  more than 1 spatial element when training"). Torch:
 *  nn.functional.instance_norm(input, weight=, bias=, eps=). */
KILN_API kiln_tensor *kiln_instance_norm(kiln_tensor *input, kiln_tensor *weight, kiln_tensor *bias, double eps);

/* ----------------------------------------- linear systems (LAPACK)
 * ops/linalg_solve.c: one lazy extern op (SOLVE) run by OpenBLAS's LAPACK
 * (?gesv: LU with partial pivoting), batch by batch on the host (a
 * KILN_CUDA tensor's data goes through host copies). Float dtypes: F32
 * and F64 solve in their own precision, F16/BF16 in F32 and round once.
 * Differentiable (Torch's rules: gB = solve(A^T, g), gA = -gB X^T), to
 * any order. A singular matrix (an exact zero pivot) is found when the
 * result is forced: the force fails with KILN_ERR_ARG naming the batch
 * (Torch raises at the call). Borrow their arguments; new reference or
 * NULL with the error set. */

/** X with A X = B: A [*, n, n], B [*, n, k] or, as Torch, [*, n] (a
 *  batch of vectors: the result then has B's sizes); the batch dims equal
 *  (no broadcasting). Result B's sizes and dtype. Errors: KILN_ERR_SHAPE
 *  (A not square, B's sizes not matching), KILN_ERR_DTYPE (non-float, or
 *  dtypes differ). Torch: torch.linalg.solve(A, B). */
KILN_API kiln_tensor *kiln_linalg_solve(kiln_tensor *A, kiln_tensor *B);
/** A^-1 for A [*, n, n]: kiln_linalg_solve(A, I) with the identity
 *  expanded to A's batch. Errors as kiln_linalg_solve. Torch:
 *  torch.linalg.inv(A). */
KILN_API kiln_tensor *kiln_linalg_inv(kiln_tensor *A);

/* ------------------------------------------------- torch.nn.init
 * nn/init.c. In place on t (a float tensor of at least 2 dims, any view
 * that writes each element once): samples from Kiln's generator (the one
 * of kiln_rand: kiln_manual_seed makes them reproducible; the values
 * differ from Torch's), computed in t's compute dtype and rounded to t's
 * dtype, written lazily through t's view as an update no gradient flows
 * through (Torch's no_grad). Fans as Torch: receptive = prod(sizes[2:]),
 * fan_in = sizes[1] * receptive, fan_out = sizes[0] * receptive. A tensor
 * without elements is left alone. Return KILN_OK or: KILN_ERR_SHAPE
 * (fewer than 2 dims), KILN_ERR_DTYPE (non-float t), KILN_ERR_ARG (an
 * expanded view, an unknown mode or nonlinearity, a non-finite std);
 * then t is unchanged. */

/** Nonlinearities of kiln_calculate_gain (Torch's names; conv and
 *  "linear" share a gain). */
typedef enum kiln_nonlinearity {
  KILN_NONLINEARITY_LINEAR = 0,
  KILN_NONLINEARITY_SIGMOID = 1,
  KILN_NONLINEARITY_TANH = 2,
  KILN_NONLINEARITY_RELU = 3,
  KILN_NONLINEARITY_LEAKY_RELU = 4,
  KILN_NONLINEARITY_SELU = 5,
} kiln_nonlinearity;

/** Which fan Kaiming initialisation preserves: fan_in (the forward
 *  pass's variance) or fan_out (the backward pass's). Torch's mode=. */
typedef enum kiln_fan_mode { KILN_FAN_IN = 0, KILN_FAN_OUT = 1 } kiln_fan_mode;

/** The recommended gain: 1 (linear, conv, sigmoid), 5/3 (tanh), sqrt(2)
 *  (relu), sqrt(2 / (1 + param^2)) (leaky_relu, param its negative slope:
 *  pass 0.01 for Torch's default), 3/4 (selu). NaN and KILN_ERR_ARG for an
 *  unknown nonlinearity. Torch: nn.init.calculate_gain(nonlinearity,
 *  param). */
KILN_API double kiln_calculate_gain(kiln_nonlinearity nonlinearity, double param);
/** t = uniform(-bound, bound), bound = sqrt(3) * gain / sqrt(fan), gain =
 *  kiln_calculate_gain(nonlinearity, a), fan by mode. Torch:
 *  nn.init.kaiming_uniform_(t, a, mode, nonlinearity). */
KILN_API int kiln_kaiming_uniform_(kiln_tensor *t, double a, kiln_fan_mode mode, kiln_nonlinearity nonlinearity);
/** t = normal(0, std), std = gain / sqrt(fan), as kiln_kaiming_uniform_.
 *  Torch: nn.init.kaiming_normal_(t, a, mode, nonlinearity). */
KILN_API int kiln_kaiming_normal_(kiln_tensor *t, double a, kiln_fan_mode mode, kiln_nonlinearity nonlinearity);
/** t = uniform(-bound, bound), bound = gain * sqrt(6 / (fan_in +
 *  fan_out)). Torch: nn.init.xavier_uniform_(t, gain). */
KILN_API int kiln_xavier_uniform_(kiln_tensor *t, double gain);
/** t = normal(0, std), std = gain * sqrt(2 / (fan_in + fan_out)). Torch:
 *  nn.init.xavier_normal_(t, gain). */
KILN_API int kiln_xavier_normal_(kiln_tensor *t, double gain);

#ifdef __cplusplus
}
#endif
#endif /* KILN_NN_H */
