"""Kiln from Python: a thin binding over libkiln's C API with Torch's
tensor interface.

    import kiln
    x = kiln.randn(3, 4)
    y = (x @ x.T).relu().sum(dim=1)   # recorded, not computed
    print(y)                          # forces, prints as Torch does

Tensors are lazy: ops record graph nodes; force(), numpy(), item(),
float() and printing compute. from_numpy and numpy() share memory with
NumPy. See docs/python.md.
"""
from __future__ import annotations

from typing import Any

from . import _dtype
from ._autograd import grad
from ._creation import (arange, cat, empty, eye, force, from_numpy, full,
                        full_like, linspace, manual_seed, ones, ones_like,
                        rand, randn, stack, tensor, where, zeros, zeros_like)
from ._dlpack import from_dlpack, to_dlpack
from ._dtype import (bfloat16, bool_, dtype, float16, float32, float64,
                     int8, int16, int32, int64, uint8)
from ._errors import (KilnArgumentError, KilnDtypeError, KilnError,
                      KilnIndexError, KilnMemoryError, KilnShapeError,
                      KilnUnsupportedError)
from ._io import load, save
from ._lib import lib as _lib
from ._profile import profile
from ._lib import path as library_path
from ._tensor import MaxResult, Tensor, UNARY, BINARY, BINARY_SCALAR

__version__ = "0.1.0"

# Torch's aliases (kiln.bool is kiln.bool_, as torch.bool).
globals()["bool"] = bool_
float = float32  # noqa: A001 (Torch's alias, as torch.float)
double = float64
half = float16
long = int64
int = int32  # noqa: A001


def get_default_dtype() -> dtype:
    """The dtype float data and float-only ops get (kiln_default_dtype)."""
    return _dtype.BY_CODE[_lib.kiln_default_dtype()]


def set_default_dtype(d: Any) -> None:
    """Sets the default float dtype (float32 or float64...)."""
    from ._errors import check
    check(_lib.kiln_set_default_dtype(_dtype.as_dtype(d).code))


def _function(name: str):
    method = getattr(Tensor, name)

    def fn(input: Tensor, *args: Any, **kwargs: Any) -> Any:
        return method(input, *args, **kwargs)
    fn.__name__ = name
    fn.__doc__ = f"kiln.{name}(t, ...) is t.{name}(...). " + (
        method.__doc__ or "")
    return fn


for _name in (UNARY + BINARY + BINARY_SCALAR
              + "sum mean prod amax amin all any logsumexp var std norm "
                "argmax argmin cumsum cumprod softmax log_softmax clamp "
                "matmul transpose permute reshape flatten squeeze "
                "unsqueeze narrow select isnan isinf isfinite "
                "logical_not".split()):
    globals()[_name] = _function(_name)


def max(input: Tensor, dim: Any = None, keepdim: bool = False) -> Any:
    """t.max(dim, keepdim): the maximum, or (values, indices) along dim."""
    return input.max(dim, keepdim)


def min(input: Tensor, dim: Any = None, keepdim: bool = False) -> Any:
    """t.min(dim, keepdim): the minimum, or (values, indices) along dim."""
    return input.min(dim, keepdim)


from . import nn, optim  # noqa: E402 (they import the names above)


def is_tensor(obj: Any) -> bool:
    """Whether obj is a kiln.Tensor."""
    return isinstance(obj, Tensor)


__all__ = [
    "Tensor", "dtype", "grad", "KilnError", "KilnArgumentError", "KilnShapeError",
    "KilnDtypeError", "KilnIndexError", "KilnMemoryError",
    "KilnUnsupportedError", "MaxResult", "tensor", "zeros", "ones", "empty",
    "full", "arange", "linspace", "eye", "rand", "randn", "manual_seed",
    "zeros_like", "ones_like", "full_like", "from_numpy", "from_dlpack", "to_dlpack", "force", "cat",
    "stack", "where", "bool_", "uint8", "int8", "int16", "int32", "int64",
    "float16", "bfloat16", "float32", "float64", "get_default_dtype",
    "set_default_dtype", "is_tensor", "library_path", "save", "load",
    "profile", "nn", "optim",
]
