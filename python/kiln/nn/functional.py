"""kiln.nn.functional: Torch's torch.nn.functional over Kiln's C layers
(nn.h). Every function records lazily and is differentiable through
kiln.grad / backward."""
from __future__ import annotations

import numbers
from typing import Optional, Sequence, Tuple, Union

from .._lib import lib
from .._tensor import Tensor, _handle, _i64s, _wrap

__all__ = ["relu", "leaky_relu", "linear", "conv2d", "max_pool2d",
           "avg_pool2d", "batch_norm", "layer_norm", "embedding", "dropout",
           "softmax", "log_softmax", "cross_entropy", "nll_loss", "mse_loss",
           "l1_loss", "binary_cross_entropy_with_logits"]

IntOr2 = Union[int, Sequence[int]]
_REDUCTION = {"none": 0, "mean": 1, "sum": 2, "batchmean": 3}


def _pair(v: IntOr2, n: int = 2) -> Tuple[int, ...]:
    if isinstance(v, numbers.Integral):
        return (int(v),) * n
    v = tuple(int(x) for x in v)
    if len(v) != n:
        raise ValueError(f"expected {n} values, got {v}")
    return v


def _h(t: Optional[Tensor]):
    return None if t is None else _handle(t)


def _rg(*ts: Optional[Tensor]) -> bool:
    return any(t is not None and t._rg for t in ts)


def _reduction(r: str) -> int:
    try:
        return _REDUCTION[r]
    except KeyError:
        raise ValueError(f"{r} is not a valid value for reduction") from None


def relu(input: Tensor) -> Tensor:
    """max(x, 0)."""
    return input.relu()


def leaky_relu(input: Tensor, negative_slope: float = 0.01) -> Tensor:
    """x for x >= 0, negative_slope * x otherwise."""
    return _wrap(lib.kiln_leaky_relu(_handle(input), negative_slope),
                 input._rg)


def linear(input: Tensor, weight: Tensor,
           bias: Optional[Tensor] = None) -> Tensor:
    """input [*, in] @ weight[out, in]^T + bias [out] (kiln_linear)."""
    return _wrap(lib.kiln_linear(_handle(input), _handle(weight), _h(bias)),
                 _rg(input, weight, bias))


def conv2d(input: Tensor, weight: Tensor, bias: Optional[Tensor] = None,
           stride: IntOr2 = 1, padding: IntOr2 = 0, dilation: IntOr2 = 1,
           groups: int = 1) -> Tensor:
    """2-d convolution: input [N, C, H, W], weight [O, C/groups, kH, kW]
    (kiln_conv with nd = 2)."""
    return _wrap(lib.kiln_conv(_handle(input), _handle(weight), _h(bias), 2,
                               _i64s(_pair(stride)), _i64s(_pair(padding)),
                               _i64s(_pair(dilation)), groups),
                 _rg(input, weight, bias))


def max_pool2d(input: Tensor, kernel_size: IntOr2,
               stride: Optional[IntOr2] = None, padding: IntOr2 = 0,
               dilation: IntOr2 = 1, ceil_mode: bool = False) -> Tensor:
    """2-d max pooling (kiln_max_pool with nd = 2; stride defaults to the
    kernel)."""
    st = _pair(kernel_size if stride is None else stride)
    return _wrap(lib.kiln_max_pool(_handle(input), 2,
                                   _i64s(_pair(kernel_size)), _i64s(st),
                                   _i64s(_pair(padding)),
                                   _i64s(_pair(dilation)), ceil_mode),
                 input._rg)


def avg_pool2d(input: Tensor, kernel_size: IntOr2,
               stride: Optional[IntOr2] = None, padding: IntOr2 = 0,
               ceil_mode: bool = False,
               count_include_pad: bool = True) -> Tensor:
    """2-d average pooling (kiln_avg_pool with nd = 2)."""
    st = _pair(kernel_size if stride is None else stride)
    return _wrap(lib.kiln_avg_pool(_handle(input), 2,
                                   _i64s(_pair(kernel_size)), _i64s(st),
                                   _i64s(_pair(padding)), ceil_mode,
                                   count_include_pad), input._rg)


def batch_norm(input: Tensor, running_mean: Optional[Tensor],
               running_var: Optional[Tensor], weight: Optional[Tensor] = None,
               bias: Optional[Tensor] = None, training: bool = False,
               momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    """Batch normalization over dim 1 (kiln_batch_norm); in training the
    running stats are updated in place, lazily."""
    return _wrap(lib.kiln_batch_norm(_handle(input), _h(running_mean),
                                     _h(running_var), _h(weight), _h(bias),
                                     training, momentum, eps),
                 _rg(input, weight, bias))


def layer_norm(input: Tensor, normalized_shape: Sequence[int],
               weight: Optional[Tensor] = None,
               bias: Optional[Tensor] = None, eps: float = 1e-5) -> Tensor:
    """Normalization over the last len(normalized_shape) dims."""
    n = 1 if isinstance(normalized_shape, numbers.Integral) else len(
        normalized_shape)
    return _wrap(lib.kiln_layer_norm(_handle(input), n, _h(weight), _h(bias),
                                     eps), _rg(input, weight, bias))


def embedding(input: Tensor, weight: Tensor) -> Tensor:
    """Rows of weight [V, D] at the int64 indices `input`."""
    return _wrap(lib.kiln_embedding(_handle(weight), _handle(input)),
                 weight._rg)


def dropout(input: Tensor, p: float = 0.5, training: bool = True) -> Tensor:
    """Zeroes elements with probability p and scales the rest by 1/(1-p)
    in training (Kiln's generator draws the mask); identity otherwise."""
    return _wrap(lib.kiln_dropout(_handle(input), p, training), input._rg)


def softmax(input: Tensor, dim: int) -> Tensor:
    """softmax along dim."""
    return input.softmax(dim)


def log_softmax(input: Tensor, dim: int) -> Tensor:
    """log_softmax along dim."""
    return input.log_softmax(dim)


def cross_entropy(input: Tensor, target: Tensor, reduction: str = "mean",
                  label_smoothing: float = 0.0) -> Tensor:
    """Cross entropy of logits [N, C] (or [N, C, ...]) against int64 class
    indices (kiln_cross_entropy)."""
    return _wrap(lib.kiln_cross_entropy(_handle(input), _handle(target),
                                        _reduction(reduction),
                                        label_smoothing), input._rg)


def nll_loss(input: Tensor, target: Tensor,
             reduction: str = "mean") -> Tensor:
    """Negative log likelihood of log-probabilities at int64 targets."""
    return _wrap(lib.kiln_nll_loss(_handle(input), _handle(target),
                                   _reduction(reduction)), input._rg)


def mse_loss(input: Tensor, target: Tensor,
             reduction: str = "mean") -> Tensor:
    """(input - target)^2, reduced."""
    return _wrap(lib.kiln_mse_loss(_handle(input), _handle(target),
                                   _reduction(reduction)),
                 _rg(input, target))


def l1_loss(input: Tensor, target: Tensor,
            reduction: str = "mean") -> Tensor:
    """|input - target|, reduced."""
    return _wrap(lib.kiln_l1_loss(_handle(input), _handle(target),
                                  _reduction(reduction)), _rg(input, target))


def binary_cross_entropy_with_logits(input: Tensor, target: Tensor,
                                     reduction: str = "mean") -> Tensor:
    """Binary cross entropy of logits against targets in [0, 1]."""
    return _wrap(lib.kiln_binary_cross_entropy_with_logits(
        _handle(input), _handle(target), None, None, _reduction(reduction)),
        _rg(input, target))
