"""kiln.nn: Torch-style modules over Kiln's C layers (nn.h).

A Module holds parameters (tensors made with requires_grad=True, so
backward() fills their .grad), buffers and sub-modules, found by attribute
assignment as in Torch; `parameters()`, `state_dict()`/`load_state_dict()`
(to safetensors with kiln.save / kiln.load), `train()`/`eval()`.
Initialization follows Torch's defaults (kaiming-uniform with a = sqrt(5)
for weights, uniform(+-1/sqrt(fan_in)) for biases) with Kiln's generator
(kiln.manual_seed), so values differ from Torch's for the same seed.
"""
from __future__ import annotations

import math
from collections import OrderedDict
from typing import Any, Dict, Iterator, List, Optional, Tuple

from .. import _dtype
from .._creation import empty, ones, randn, zeros
from .._errors import check
from .._lib import lib
from .._tensor import Tensor, _handle
from . import functional
from .functional import IntOr2, _pair

__all__ = ["Module", "Sequential", "Linear", "Conv2d", "MaxPool2d",
           "AvgPool2d", "BatchNorm2d", "LayerNorm", "Dropout", "Embedding",
           "ReLU", "Flatten", "CrossEntropyLoss", "MSELoss", "NLLLoss",
           "L1Loss", "BCEWithLogitsLoss", "functional"]


def _param(*sizes: int) -> Tensor:
    return empty(*sizes).requires_grad_(True)


def _init_uniform(w: Tensor, b: Optional[Tensor], fan_in: int) -> None:
    """Torch's reset_parameters for Linear and Conv."""
    check(lib.kiln_kaiming_uniform_(_handle(w), math.sqrt(5.0), 0, 4))
    if b is not None:
        bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
        check(lib.kiln_uniform_(_handle(b), -bound, bound))


class Module:
    """Base class of layers: parameters, buffers and sub-modules are found
    by attribute assignment; forward() computes; calling the module calls
    forward."""

    def __init__(self) -> None:
        object.__setattr__(self, "_params", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "training", True)

    def __setattr__(self, name: str, value: Any) -> None:
        for d in (self._params, self._buffers, self._modules):
            d.pop(name, None)
        if isinstance(value, Module):
            self._modules[name] = value
        elif isinstance(value, Tensor) and value.requires_grad:
            self._params[name] = value
        object.__setattr__(self, name, value)

    def register_buffer(self, name: str, t: Optional[Tensor]) -> None:
        """A tensor saved in state_dict but not trained (running stats)."""
        object.__setattr__(self, name, t)
        if t is not None:
            self._buffers[name] = t

    def forward(self, *args: Any) -> Any:
        """The computation (subclasses define it)."""
        raise NotImplementedError

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward(*args, **kwargs)

    def named_parameters(self, prefix: str = ""
                         ) -> Iterator[Tuple[str, Tensor]]:
        """(name, parameter) pairs of this module and its sub-modules."""
        for n, p in self._params.items():
            yield prefix + n, p
        for mn, m in self._modules.items():
            yield from m.named_parameters(prefix + mn + ".")

    def parameters(self) -> List[Tensor]:
        """Every parameter (requires_grad leaves), in definition order."""
        return [p for _, p in self.named_parameters()]

    def _named_tensors(self, prefix: str = ""
                       ) -> Iterator[Tuple[str, Tensor]]:
        for n, p in self._params.items():
            yield prefix + n, p
        for n, b in self._buffers.items():
            yield prefix + n, b
        for mn, m in self._modules.items():
            yield from m._named_tensors(prefix + mn + ".")

    def state_dict(self) -> "OrderedDict[str, Tensor]":
        """Parameters and buffers by dotted name (the tensors themselves,
        as Torch's state_dict; kiln.save writes them to safetensors)."""
        return OrderedDict(self._named_tensors())

    def load_state_dict(self, state: Dict[str, Tensor],
                        strict: bool = True) -> None:
        """Copies the values of `state` (e.g. kiln.load(path)) into the
        parameters and buffers, in place; KeyError for missing or (strict)
        unexpected names, KilnShapeError for other sizes."""
        own = self.state_dict()
        missing = [k for k in own if k not in state]
        extra = [k for k in state if k not in own]
        if strict and (missing or extra):
            raise KeyError(f"load_state_dict: missing {missing}, "
                           f"unexpected {extra}")
        for k, t in own.items():
            if k in state:
                if tuple(state[k].shape) != t.shape:
                    from .._errors import KilnShapeError
                    raise KilnShapeError(
                        f"load_state_dict: {k} has sizes "
                        f"{list(state[k].shape)}, the module's "
                        f"{list(t.shape)}", -2)
                t.detach().copy_(state[k])

    def train(self, mode: bool = True) -> "Module":
        """Training mode (dropout on, batch norm on batch statistics)."""
        object.__setattr__(self, "training", mode)
        for m in self._modules.values():
            m.train(mode)
        return self

    def eval(self) -> "Module":
        """Evaluation mode: train(False)."""
        return self.train(False)

    def zero_grad(self) -> None:
        """Sets every parameter's .grad to None."""
        for p in self.parameters():
            p.grad = None


class Sequential(Module):
    """The modules applied in order."""

    def __init__(self, *modules: Module) -> None:
        super().__init__()
        for i, m in enumerate(modules):
            setattr(self, str(i), m)

    def forward(self, x: Any) -> Any:
        """The Sequential of the input (see the class docstring)."""
        for m in self._modules.values():
            x = m(x)
        return x

    def __getitem__(self, i: int) -> Module:
        return list(self._modules.values())[i]

    def __len__(self) -> int:
        return len(self._modules)


class Linear(Module):
    """y = x @ weight^T + bias; weight [out, in], bias [out]."""

    def __init__(self, in_features: int, out_features: int,
                 bias: bool = True) -> None:
        super().__init__()
        self.weight = _param(out_features, in_features)
        self.bias = _param(out_features) if bias else None
        _init_uniform(self.weight, self.bias, in_features)

    def forward(self, x: Tensor) -> Tensor:
        """The Linear of the input (see the class docstring)."""
        return functional.linear(x, self.weight, self.bias)


class Conv2d(Module):
    """2-d convolution; weight [out, in/groups, kH, kW], bias [out]."""

    def __init__(self, in_channels: int, out_channels: int,
                 kernel_size: IntOr2, stride: IntOr2 = 1,
                 padding: IntOr2 = 0, dilation: IntOr2 = 1, groups: int = 1,
                 bias: bool = True) -> None:
        super().__init__()
        k = _pair(kernel_size)
        self.stride, self.padding = _pair(stride), _pair(padding)
        self.dilation, self.groups = _pair(dilation), groups
        self.weight = _param(out_channels, in_channels // groups, *k)
        self.bias = _param(out_channels) if bias else None
        _init_uniform(self.weight, self.bias,
                      in_channels // groups * k[0] * k[1])

    def forward(self, x: Tensor) -> Tensor:
        """The Conv2d of the input (see the class docstring)."""
        return functional.conv2d(x, self.weight, self.bias, self.stride,
                                 self.padding, self.dilation, self.groups)


class MaxPool2d(Module):
    """2-d max pooling (stride defaults to the kernel size)."""

    def __init__(self, kernel_size: IntOr2, stride: Optional[IntOr2] = None,
                 padding: IntOr2 = 0, dilation: IntOr2 = 1,
                 ceil_mode: bool = False) -> None:
        super().__init__()
        self.args = (kernel_size, stride, padding, dilation, ceil_mode)

    def forward(self, x: Tensor) -> Tensor:
        """The MaxPool2d of the input (see the class docstring)."""
        return functional.max_pool2d(x, *self.args)


class AvgPool2d(Module):
    """2-d average pooling."""

    def __init__(self, kernel_size: IntOr2, stride: Optional[IntOr2] = None,
                 padding: IntOr2 = 0) -> None:
        super().__init__()
        self.args = (kernel_size, stride, padding)

    def forward(self, x: Tensor) -> Tensor:
        """The AvgPool2d of the input (see the class docstring)."""
        return functional.avg_pool2d(x, *self.args)


class BatchNorm2d(Module):
    """Batch normalization of [N, C, H, W] over N, H, W, with learned
    weight/bias [C] and running_mean/running_var buffers updated in
    training (num_batches_tracked counts the training batches, as
    Torch's)."""

    def __init__(self, num_features: int, eps: float = 1e-5,
                 momentum: float = 0.1, affine: bool = True) -> None:
        super().__init__()
        self.eps, self.momentum = eps, momentum
        self.weight = ones(num_features).requires_grad_(True) if affine \
            else None
        self.bias = zeros(num_features).requires_grad_(True) if affine \
            else None
        self.register_buffer("running_mean", zeros(num_features))
        self.register_buffer("running_var", ones(num_features))
        self.register_buffer("num_batches_tracked",
                             zeros((), dtype=_dtype.int64))

    def forward(self, x: Tensor) -> Tensor:
        """The BatchNorm2d of the input (see the class docstring)."""
        if self.training:
            self.num_batches_tracked.add_(1)
        return functional.batch_norm(x, self.running_mean, self.running_var,
                                     self.weight, self.bias, self.training,
                                     self.momentum, self.eps)


class LayerNorm(Module):
    """Normalization over the last dims, with weight and bias."""

    def __init__(self, normalized_shape: Any, eps: float = 1e-5) -> None:
        super().__init__()
        shape = (normalized_shape,) if isinstance(normalized_shape, int) \
            else tuple(normalized_shape)
        self.shape, self.eps = shape, eps
        self.weight = ones(*shape).requires_grad_(True)
        self.bias = zeros(*shape).requires_grad_(True)

    def forward(self, x: Tensor) -> Tensor:
        """The LayerNorm of the input (see the class docstring)."""
        return functional.layer_norm(x, self.shape, self.weight, self.bias,
                                     self.eps)


class Dropout(Module):
    """Dropout with probability p in training; identity in eval."""

    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        """The Dropout of the input (see the class docstring)."""
        return functional.dropout(x, self.p, self.training)


class Embedding(Module):
    """A lookup table weight [num_embeddings, embedding_dim] ~ N(0, 1)."""

    def __init__(self, num_embeddings: int, embedding_dim: int) -> None:
        super().__init__()
        self.weight = randn(num_embeddings, embedding_dim
                            ).requires_grad_(True)

    def forward(self, idx: Tensor) -> Tensor:
        """The Embedding of the input (see the class docstring)."""
        return functional.embedding(idx, self.weight)


class ReLU(Module):
    """max(x, 0)."""

    def forward(self, x: Tensor) -> Tensor:
        """The ReLU of the input (see the class docstring)."""
        return x.relu()


class Flatten(Module):
    """Dims start_dim..end_dim merged (default: all but the batch dim)."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1) -> None:
        super().__init__()
        self.dims = (start_dim, end_dim)

    def forward(self, x: Tensor) -> Tensor:
        """The Flatten of the input (see the class docstring)."""
        return x.flatten(*self.dims)


class _Loss(Module):
    def __init__(self, reduction: str = "mean") -> None:
        super().__init__()
        self.reduction = reduction


class CrossEntropyLoss(_Loss):
    """functional.cross_entropy as a module."""

    def __init__(self, reduction: str = "mean",
                 label_smoothing: float = 0.0) -> None:
        super().__init__(reduction)
        self.label_smoothing = label_smoothing

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        """The CrossEntropyLoss of the input (see the class docstring)."""
        return functional.cross_entropy(input, target, self.reduction,
                                        self.label_smoothing)


class NLLLoss(_Loss):
    """functional.nll_loss as a module."""

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        """The NLLLoss of the input (see the class docstring)."""
        return functional.nll_loss(input, target, self.reduction)


class MSELoss(_Loss):
    """functional.mse_loss as a module."""

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        """The MSELoss of the input (see the class docstring)."""
        return functional.mse_loss(input, target, self.reduction)


class L1Loss(_Loss):
    """functional.l1_loss as a module."""

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        """The L1Loss of the input (see the class docstring)."""
        return functional.l1_loss(input, target, self.reduction)


class BCEWithLogitsLoss(_Loss):
    """functional.binary_cross_entropy_with_logits as a module."""

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        """The BCEWithLogitsLoss of the input (see the class docstring)."""
        return functional.binary_cross_entropy_with_logits(
            input, target, self.reduction)
