"""kiln.Tensor: one owned reference to a C kiln_tensor handle.

Ownership model. The package never opens a Kiln scope, so every handle a C
function returns is a new reference that exactly one Tensor owns; the
Tensor releases it in close() or __del__ (whichever comes first). Views
share the storage through the C reference counts, so dropping a base
tensor never invalidates its views. After close() the handle is gone and
any use raises KilnArgumentError instead of touching freed memory.

Operators record lazily; reading a value (numpy(), item(), float(),
repr) forces.
"""
from __future__ import annotations

import ctypes
import numbers
from typing import (Any, Iterator, NamedTuple, Optional, Sequence, Tuple,
                    Union)

import numpy as np

from . import _dtype
from ._errors import KilnArgumentError, check, take_error
from ._format import tensor_repr
from ._lib import lib

_I64 = ctypes.c_int64
_INT = ctypes.c_int
_new = object.__new__
Number = Union[int, float, bool]
Dims = Union[None, int, Sequence[int]]


def _i64s(seq: Sequence[int]):
    return (_I64 * len(seq))(*seq)


def _ints(seq: Sequence[int]):
    return (_INT * len(seq))(*seq)


def _sizes(args: Tuple[Any, ...]) -> Tuple[int, ...]:
    """Sizes given as f(2, 3) or f((2, 3)) / f([2, 3])."""
    if len(args) == 1 and not isinstance(args[0], numbers.Integral):
        return tuple(int(s) for s in args[0])
    return tuple(int(s) for s in args)


def _wrap(h: Optional[int], requires_grad: bool = False) -> "Tensor":
    """A Tensor owning the new reference `h`; the pending Kiln error as an
    exception when `h` is NULL."""
    if not h:
        raise take_error()
    t = _new(Tensor)
    t._h = h
    t._rg = requires_grad
    t._leaf = False
    t._grad = None
    return t


def _handle(t: "Tensor") -> int:
    h = t._h
    if h is None:
        raise KilnArgumentError("kiln: the tensor was closed (released); "
                                "it cannot be used", -1)
    return h


def _scalar_dtype(v: Number, like: "Tensor") -> int:
    """kiln_dtype of the 0-d tensor standing for the Python number `v` in an
    op with `like`: a 0-d operand only lifts the dtype category, as a
    Python number does in Torch."""
    if isinstance(v, bool):
        return 0
    if isinstance(v, numbers.Integral):
        return 5
    code = lib.kiln_dtype_of(like._h)
    if code == 9:
        return 9
    return code if code in (6, 7, 8) else lib.kiln_default_dtype()


def _as_tensor(v: Any, like: "Tensor") -> "Tensor":
    """`v` as a Tensor: itself, or a 0-d tensor for a Python number."""
    if isinstance(v, Tensor):
        return v
    if isinstance(v, (numbers.Number, np.generic)) and not isinstance(
            v, complex):
        v = v.item() if isinstance(v, np.generic) else v
        return _wrap(lib.kiln_scalar(_scalar_dtype(v, like), float(v)))
    if isinstance(v, np.ndarray):
        from ._creation import tensor
        return tensor(v)
    raise TypeError(f"kiln: expected a Tensor or a number, got "
                    f"{type(v).__name__}")


def _binary(a: "Tensor", b: Any, fn, fn_scalar) -> "Tensor":
    ha = _handle(a)
    if isinstance(b, Tensor):
        return _wrap(fn(ha, _handle(b)), a._rg or b._rg)
    if fn_scalar is not None and isinstance(b, (int, float)) \
            and not isinstance(b, bool):
        return _wrap(fn_scalar(ha, b), a._rg)
    b = _as_tensor(b, a)
    return _wrap(fn(ha, b._h), a._rg or b._rg)


def _rbinary(a: "Tensor", b: Any, fn) -> "Tensor":
    """b op a for a non-Tensor b."""
    b = _as_tensor(b, a)
    return _wrap(fn(b._h, _handle(a)), a._rg)


def _dims(dim: Dims, ndim: int):
    """(count, int array) for a reduction's dims; (0, None) = all."""
    if dim is None:
        return 0, None
    if isinstance(dim, numbers.Integral):
        return 1, _ints((int(dim),))
    dim = tuple(int(d) for d in dim)
    return len(dim), _ints(dim) if dim else None


class MaxResult(NamedTuple):
    """(values, indices) of max/min along a dim, as torch.return_types."""
    values: "Tensor"
    indices: "Tensor"


class _NumpyHolder:
    """Keeps a Tensor alive under a NumPy array made from kiln_data: the
    array's base, exposing the memory through __array_interface__."""

    __slots__ = ("tensor", "__array_interface__")

    def __init__(self, tensor: "Tensor", ptr: int, shape, strides,
                 typestr: str, writable: bool) -> None:
        self.tensor = tensor
        self.__array_interface__ = {
            "version": 3, "shape": shape, "typestr": typestr,
            "data": (ptr, not writable), "strides": strides}


class Tensor:
    """A lazy strided tensor (Torch's torch.Tensor interface where Kiln has
    the op). Create one with kiln.tensor, kiln.zeros, kiln.from_numpy...;
    every op records a node and returns a new Tensor; reading values
    forces."""

    __slots__ = ("_h", "_rg", "_leaf", "_grad", "__weakref__")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("kiln.Tensor is not constructed directly: use "
                        "kiln.tensor, kiln.zeros, kiln.empty, ...")

    # ------------------------------------------------------ lifetime
    def close(self) -> None:
        """Releases the C handle now (kiln_release). Later use raises
        KilnArgumentError. Idempotent."""
        h, self._h = self._h, None
        if h:
            lib.kiln_release(h)
            if lib.kiln_last_status():
                import warnings
                err = take_error()
                warnings.warn(f"kiln: releasing a tensor: {err}",
                              RuntimeWarning, stacklevel=2)

    def __del__(self) -> None:
        h = getattr(self, "_h", None)
        if h and lib is not None:
            self._h = None
            lib.kiln_release(h)
            if lib.kiln_last_status():
                lib.kiln_clear_error()

    def __enter__(self) -> "Tensor":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------- metadata
    @property
    def ndim(self) -> int:
        """Number of dims (Torch: ndim, dim())."""
        return lib.kiln_dim(_handle(self))

    def dim(self) -> int:
        """Number of dims (Torch: dim())."""
        return lib.kiln_dim(_handle(self))

    @property
    def shape(self) -> Tuple[int, ...]:
        """Sizes as a tuple (Torch: shape / size())."""
        h = _handle(self)
        n = lib.kiln_dim(h)
        return tuple(lib.kiln_sizes(h)[:n]) if n else ()

    def size(self, dim: Optional[int] = None) -> Union[int, Tuple[int, ...]]:
        """Sizes, or the size of `dim` (negative counts from the end)."""
        s = self.shape
        return s if dim is None else s[dim]

    def stride(self, dim: Optional[int] = None
               ) -> Union[int, Tuple[int, ...]]:
        """Strides in elements, or the stride of `dim` (Torch: stride())."""
        h = _handle(self)
        n = lib.kiln_dim(h)
        s = tuple(lib.kiln_strides(h)[:n]) if n else ()
        return s if dim is None else s[dim]

    def storage_offset(self) -> int:
        """Offset of element 0 in the storage, in elements."""
        return lib.kiln_storage_offset(_handle(self))

    def numel(self) -> int:
        """Number of elements."""
        return lib.kiln_numel(_handle(self))

    def nelement(self) -> int:
        """Number of elements (Torch alias of numel)."""
        return self.numel()

    @property
    def dtype(self) -> _dtype.dtype:
        """Element type (kiln.float32, ...)."""
        return _dtype.BY_CODE[lib.kiln_dtype_of(_handle(self))]

    @property
    def device(self) -> str:
        """"cpu" or "cuda"."""
        return "cuda" if lib.kiln_device_of(_handle(self)) == 1 else "cpu"

    def is_contiguous(self) -> bool:
        """Whether the view is row-major contiguous."""
        return bool(lib.kiln_is_contiguous(_handle(self)))

    def is_floating_point(self) -> bool:
        """Whether the dtype is a float dtype."""
        return self.dtype.is_floating_point

    def __len__(self) -> int:
        s = self.shape
        if not s:
            raise TypeError("len() of a 0-d tensor")
        return s[0]

    # --------------------------------------------------------- autograd
    @property
    def requires_grad(self) -> bool:
        """Whether gradients flow to this tensor (set on leaves)."""
        return self._rg

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        if self._rg and not self._leaf and not value:
            raise RuntimeError("you can only change requires_grad flags of "
                               "leaf variables")
        from ._autograd import register_leaf
        self._rg = bool(value)
        self._leaf = bool(value)
        register_leaf(self, bool(value))

    def requires_grad_(self, value: bool = True) -> "Tensor":
        """Marks this tensor as a leaf gradients flow to (Torch:
        requires_grad_). Returns self."""
        self.requires_grad = value
        return self

    @property
    def is_leaf(self) -> bool:
        """True for tensors not computed from one that requires grad."""
        return self._leaf or not self._rg

    @property
    def grad(self) -> Optional["Tensor"]:
        """The gradient backward() accumulated, or None."""
        return self._grad

    @grad.setter
    def grad(self, value: Optional["Tensor"]) -> None:
        self._grad = value

    def backward(self, gradient: Optional["Tensor"] = None) -> None:
        """Accumulates this tensor's gradient into .grad of every live leaf
        made with requires_grad=True (kiln_grad; see kiln._autograd).
        `gradient`: the cotangent, needed unless numel is 1."""
        from ._autograd import backward
        backward(self, gradient)

    def detach(self) -> "Tensor":
        """Same storage and view, no gradient through it (kiln_detach)."""
        return _wrap(lib.kiln_detach(_handle(self)))

    # ------------------------------------------------------- forcing
    def force(self) -> "Tensor":
        """Computes the value now (kiln_realize). Returns self."""
        check(lib.kiln_realize(_handle(self)))
        return self

    def numpy(self) -> np.ndarray:
        """The values as a NumPy array sharing Kiln's memory (forces; no
        copy): writes through the array are seen by Kiln and later Kiln
        writes by the array. The array keeps this tensor alive. A view with
        a repeated element (stride 0) is read-only. bfloat16 has no NumPy
        dtype (TypeError: use .to(kiln.float32))."""
        d = self.dtype
        if d.np is None:
            raise TypeError("kiln: bfloat16 has no NumPy dtype; convert "
                            "with .to(kiln.float32) first")
        h = _handle(self)
        ptr = lib.kiln_data(h)
        if not ptr:
            if self.numel() == 0:
                return np.empty(self.shape, d.np)
            raise take_error()
        shape = self.shape
        strides = tuple(s * d.itemsize for s in self.stride())
        writable = all(st != 0 or n <= 1 for st, n in zip(strides, shape))
        holder = _NumpyHolder(self, ptr, shape, strides, d.np.str, writable)
        return np.asarray(holder)

    def __dlpack__(self, stream: Any = None) -> Any:
        """A DLPack capsule sharing this tensor's memory (forces); e.g.
        torch.from_dlpack(t). See kiln._dlpack."""
        from ._dlpack import to_dlpack
        return to_dlpack(self)

    def __dlpack_device__(self) -> Tuple[int, int]:
        """(kDLCPU = 1, 0): Kiln exports CPU memory."""
        return (1, 0)

    def tolist(self) -> Any:
        """The values as nested Python lists (forces)."""
        return self._values().tolist()

    def _values(self) -> np.ndarray:
        """A NumPy copy of the values (bfloat16 and float16 widened to
        float32 for printing is done by the caller)."""
        if self.dtype.np is None:
            return self.to(_dtype.float32)._values()
        out = np.empty(self.shape, self.dtype.np)
        check(lib.kiln_read(_handle(self), out.ctypes.data, out.nbytes))
        return out

    def item(self) -> Number:
        """The single element as a Python number (forces); KilnShapeError
        unless numel is 1."""
        v = ctypes.c_double()
        check(lib.kiln_item_f64(_handle(self), ctypes.byref(v)))
        d = self.dtype
        if d.is_floating_point:
            return v.value
        if d is _dtype.bool_:
            return bool(v.value)
        return int(v.value)

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __index__(self) -> int:
        if self.dtype.is_floating_point or self.numel() != 1:
            raise TypeError("only integer tensors of a single element can "
                            "be converted to an index")
        return int(self.item())

    def __bool__(self) -> bool:
        if self.numel() != 1:
            raise RuntimeError("Boolean value of Tensor with more than one "
                               "value is ambiguous")
        return bool(self.item())

    def __repr__(self) -> str:
        if self._h is None:
            return "<kiln.Tensor (closed)>"
        values = self._values()
        if values.dtype == np.float16:
            values = values.astype(np.float32)
        extra = ["requires_grad=True"] if self._rg and self._leaf else []
        return tensor_repr(values, self.dtype.name,
                           _dtype.BY_CODE[lib.kiln_default_dtype()].name,
                           extra)

    __str__ = __repr__

    def __array__(self, dtype: Any = None) -> np.ndarray:
        a = self._values()
        return a if dtype is None else a.astype(dtype)

    # ------------------------------------------------------ conversion
    def to(self, dtype: Any) -> "Tensor":
        """A copy converted to `dtype` (self when it already has it)."""
        d = _dtype.as_dtype(dtype)
        return _wrap(lib.kiln_to_dtype(_handle(self), d.code), self._rg)

    def float(self) -> "Tensor":
        """to(kiln.float32)."""
        return self.to(_dtype.float32)

    def double(self) -> "Tensor":
        """to(kiln.float64)."""
        return self.to(_dtype.float64)

    def long(self) -> "Tensor":
        """to(kiln.int64)."""
        return self.to(_dtype.int64)

    def int(self) -> "Tensor":
        """to(kiln.int32)."""
        return self.to(_dtype.int32)

    def bool(self) -> "Tensor":
        """to(kiln.bool)."""
        return self.to(_dtype.bool_)

    def clone(self) -> "Tensor":
        """A lazy copy with its own storage (kiln_clone)."""
        return _wrap(lib.kiln_clone(_handle(self)), self._rg)

    def contiguous(self) -> "Tensor":
        """Self's values in a contiguous layout (a copy unless already
        contiguous)."""
        return _wrap(lib.kiln_contiguous(_handle(self)), self._rg)

    # ----------------------------------------------------------- views
    def view(self, *sizes: Any) -> "Tensor":
        """A view with new sizes (one may be -1); KilnShapeError when the
        strides do not allow it (use reshape)."""
        s = _sizes(sizes)
        return _wrap(lib.kiln_view(_handle(self), len(s), _i64s(s)),
                     self._rg)

    def reshape(self, *sizes: Any) -> "Tensor":
        """view() when possible, else a lazy copy."""
        s = _sizes(sizes)
        return _wrap(lib.kiln_reshape(_handle(self), len(s), _i64s(s)),
                     self._rg)

    def expand(self, *sizes: Any) -> "Tensor":
        """A view broadcasting size-1 dims to `sizes` (stride 0)."""
        s = _sizes(sizes)
        return _wrap(lib.kiln_expand(_handle(self), len(s), _i64s(s)),
                     self._rg)

    def permute(self, *dims: Any) -> "Tensor":
        """A view with the dims reordered."""
        d = _sizes(dims)
        return _wrap(lib.kiln_permute(_handle(self), len(d), _ints(d)),
                     self._rg)

    def transpose(self, dim0: int, dim1: int) -> "Tensor":
        """A view with two dims swapped."""
        return _wrap(lib.kiln_transpose(_handle(self), dim0, dim1), self._rg)

    def t(self) -> "Tensor":
        """transpose(0, 1) of a 2-d tensor (0-d and 1-d: self)."""
        return _wrap(lib.kiln_t(_handle(self)), self._rg)

    @property
    def T(self) -> "Tensor":
        """The dims reversed (Torch: T)."""
        n = self.ndim
        return self.permute(tuple(range(n - 1, -1, -1)))

    def narrow(self, dim: int, start: int, length: int) -> "Tensor":
        """A view of `length` elements of `dim` from `start`."""
        return _wrap(lib.kiln_narrow(_handle(self), dim, start, length),
                     self._rg)

    def select(self, dim: int, index: int) -> "Tensor":
        """A view of one index of `dim`, which is removed."""
        return _wrap(lib.kiln_select(_handle(self), dim, index), self._rg)

    def squeeze(self, dim: Optional[int] = None) -> "Tensor":
        """A view without size-1 dims (or only `dim` if it has size 1)."""
        h = _handle(self)
        return _wrap(lib.kiln_squeeze(h) if dim is None
                     else lib.kiln_squeeze_dim(h, dim), self._rg)

    def unsqueeze(self, dim: int) -> "Tensor":
        """A view with a size-1 dim inserted at `dim`."""
        return _wrap(lib.kiln_unsqueeze(_handle(self), dim), self._rg)

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> "Tensor":
        """Dims start_dim..end_dim merged into one (a view if possible)."""
        return _wrap(lib.kiln_flatten(_handle(self), start_dim, end_dim),
                     self._rg)

    def unfold(self, dim: int, size: int, step: int) -> "Tensor":
        """A view of the windows of `size` along `dim`, `step` apart."""
        return _wrap(lib.kiln_unfold(_handle(self), dim, size, step),
                     self._rg)

    # -------------------------------------------------------- reductions
    def _reduce(self, fn, dim: Dims, keepdim: bool) -> "Tensor":
        n, arr = _dims(dim, 0)
        return _wrap(fn(_handle(self), n, arr, keepdim), self._rg)

    def sum(self, dim: Dims = None, keepdim: bool = False) -> "Tensor":
        """Sum over `dim` (an int or a tuple; None: all)."""
        return self._reduce(lib.kiln_sum, dim, keepdim)

    def mean(self, dim: Dims = None, keepdim: bool = False) -> "Tensor":
        """Mean over `dim` (float dtypes only)."""
        return self._reduce(lib.kiln_mean, dim, keepdim)

    def prod(self, dim: Dims = None, keepdim: bool = False) -> "Tensor":
        """Product over `dim`."""
        return self._reduce(lib.kiln_prod, dim, keepdim)

    def amax(self, dim: Dims = None, keepdim: bool = False) -> "Tensor":
        """Maximum over `dim`."""
        return self._reduce(lib.kiln_amax, dim, keepdim)

    def amin(self, dim: Dims = None, keepdim: bool = False) -> "Tensor":
        """Minimum over `dim`."""
        return self._reduce(lib.kiln_amin, dim, keepdim)

    def all(self, dim: Dims = None, keepdim: bool = False) -> "Tensor":
        """Whether every element over `dim` is nonzero (BOOL)."""
        return self._reduce(lib.kiln_all, dim, keepdim)

    def any(self, dim: Dims = None, keepdim: bool = False) -> "Tensor":
        """Whether any element over `dim` is nonzero (BOOL)."""
        return self._reduce(lib.kiln_any, dim, keepdim)

    def logsumexp(self, dim: Dims = None, keepdim: bool = False) -> "Tensor":
        """log(sum(exp(self))) over `dim`, computed stably."""
        return self._reduce(lib.kiln_logsumexp, dim, keepdim)

    def var(self, dim: Dims = None, unbiased: bool = True,
            keepdim: bool = False) -> "Tensor":
        """Variance over `dim` (unbiased: divides by N - 1)."""
        n, arr = _dims(dim, 0)
        return _wrap(lib.kiln_var(_handle(self), n, arr, int(unbiased),
                                  keepdim), self._rg)

    def std(self, dim: Dims = None, unbiased: bool = True,
            keepdim: bool = False) -> "Tensor":
        """Standard deviation over `dim`."""
        n, arr = _dims(dim, 0)
        return _wrap(lib.kiln_std(_handle(self), n, arr, int(unbiased),
                                  keepdim), self._rg)

    def norm(self, p: float = 2.0, dim: Dims = None,
             keepdim: bool = False) -> "Tensor":
        """The p-norm over `dim`."""
        n, arr = _dims(dim, 0)
        return _wrap(lib.kiln_norm(_handle(self), float(p), n, arr, keepdim),
                     self._rg)

    def _minmax(self, fn_all, fn_dim, dim: Optional[int], keepdim: bool):
        if dim is None:
            return self._reduce(fn_all, None, False)
        v, i = ctypes.c_void_p(), ctypes.c_void_p()
        check(fn_dim(_handle(self), dim, keepdim, ctypes.byref(v),
                     ctypes.byref(i)))
        return MaxResult(_wrap(v.value, self._rg), _wrap(i.value))

    def max(self, dim: Optional[int] = None, keepdim: bool = False
            ) -> Union["Tensor", MaxResult]:
        """The maximum (no dim), or (values, indices) along `dim`."""
        return self._minmax(lib.kiln_amax, lib.kiln_max, dim, keepdim)

    def min(self, dim: Optional[int] = None, keepdim: bool = False
            ) -> Union["Tensor", MaxResult]:
        """The minimum (no dim), or (values, indices) along `dim`."""
        return self._minmax(lib.kiln_amin, lib.kiln_min, dim, keepdim)

    def _arg(self, fn, dim: Optional[int], keepdim: bool) -> "Tensor":
        if dim is None:
            flat = self.reshape(-1)  # held: its handle must outlive the call
            return _wrap(fn(_handle(flat), 0, False))
        return _wrap(fn(_handle(self), dim, keepdim))

    def argmax(self, dim: Optional[int] = None,
               keepdim: bool = False) -> "Tensor":
        """Index (int64) of the first maximum along `dim` (None: of the
        flattened tensor)."""
        return self._arg(lib.kiln_argmax, dim, keepdim)

    def argmin(self, dim: Optional[int] = None,
               keepdim: bool = False) -> "Tensor":
        """Index (int64) of the first minimum along `dim`."""
        return self._arg(lib.kiln_argmin, dim, keepdim)

    def cumsum(self, dim: int) -> "Tensor":
        """Running sum along `dim`."""
        return _wrap(lib.kiln_cumsum(_handle(self), dim), self._rg)

    def cumprod(self, dim: int) -> "Tensor":
        """Running product along `dim`."""
        return _wrap(lib.kiln_cumprod(_handle(self), dim), self._rg)

    def softmax(self, dim: int) -> "Tensor":
        """softmax along `dim`."""
        return _wrap(lib.kiln_softmax(_handle(self), dim), self._rg)

    def log_softmax(self, dim: int) -> "Tensor":
        """log(softmax) along `dim`, computed stably."""
        return _wrap(lib.kiln_log_softmax(_handle(self), dim), self._rg)

    def clamp(self, min: Optional[float] = None,
              max: Optional[float] = None) -> "Tensor":
        """Elements clamped to [min, max] (None: unbounded)."""
        lo = float("-inf") if min is None else float(min)
        hi = float("inf") if max is None else float(max)
        return _wrap(lib.kiln_clamp(_handle(self), lo, hi), self._rg)

    # ---------------------------------------------------------- in-place
    def _inplace(self, other: Any, fn, fn_scalar) -> "Tensor":
        h = _handle(self)
        if isinstance(other, Tensor):
            check(fn(h, _handle(other)))
            self._rg = self._rg or other._rg
        elif fn_scalar is not None and isinstance(other, (int, float)) \
                and not isinstance(other, bool):
            check(fn_scalar(h, other))
        else:
            other = _as_tensor(other, self)  # held across the call
            check(fn(h, other._h))
        return self

    def add_(self, other: Any) -> "Tensor":
        """self += other, through the view (seen by every tensor sharing
        the storage). Returns self."""
        return self._inplace(other, lib.kiln_add_, lib.kiln_add_scalar_)

    def sub_(self, other: Any) -> "Tensor":
        """self -= other in place. Returns self."""
        return self._inplace(other, lib.kiln_sub_, lib.kiln_sub_scalar_)

    def mul_(self, other: Any) -> "Tensor":
        """self *= other in place. Returns self."""
        return self._inplace(other, lib.kiln_mul_, lib.kiln_mul_scalar_)

    def div_(self, other: Any) -> "Tensor":
        """self /= other in place (float self). Returns self."""
        return self._inplace(other, lib.kiln_div_, lib.kiln_div_scalar_)

    def pow_(self, other: Any) -> "Tensor":
        """self **= other in place. Returns self."""
        return self._inplace(other, lib.kiln_pow_, lib.kiln_pow_scalar_)

    __iadd__ = add_
    __isub__ = sub_
    __imul__ = mul_
    __itruediv__ = div_
    __ipow__ = pow_

    def fill_(self, value: Number) -> "Tensor":
        """Every element of the view set to `value`. Returns self."""
        check(lib.kiln_fill_(_handle(self), float(value)))
        return self

    def zero_(self) -> "Tensor":
        """fill_(0). Returns self."""
        check(lib.kiln_zero_(_handle(self)))
        return self

    def copy_(self, src: Any) -> "Tensor":
        """Copies `src` (broadcast, converted) into the view. Returns
        self."""
        src = _as_tensor(src, self)  # held across the call
        check(lib.kiln_copy_(_handle(self), src._h))
        return self

    # --------------------------------------------------------- operators
    def __add__(self, o: Any) -> "Tensor":
        return _binary(self, o, lib.kiln_add, lib.kiln_add_scalar)

    def __radd__(self, o: Any) -> "Tensor":
        return _binary(self, o, lib.kiln_add, lib.kiln_add_scalar)

    def __sub__(self, o: Any) -> "Tensor":
        return _binary(self, o, lib.kiln_sub, lib.kiln_sub_scalar)

    def __rsub__(self, o: Any) -> "Tensor":
        return _rbinary(self, o, lib.kiln_sub)

    def __mul__(self, o: Any) -> "Tensor":
        return _binary(self, o, lib.kiln_mul, lib.kiln_mul_scalar)

    def __rmul__(self, o: Any) -> "Tensor":
        return _binary(self, o, lib.kiln_mul, lib.kiln_mul_scalar)

    def __truediv__(self, o: Any) -> "Tensor":
        return _binary(self, o, lib.kiln_div, lib.kiln_div_scalar)

    def __rtruediv__(self, o: Any) -> "Tensor":
        return _rbinary(self, o, lib.kiln_div)

    def __pow__(self, o: Any) -> "Tensor":
        return _binary(self, o, lib.kiln_pow, lib.kiln_pow_scalar)

    def __rpow__(self, o: Any) -> "Tensor":
        return _rbinary(self, o, lib.kiln_pow)

    def __mod__(self, o: Any) -> "Tensor":
        return _binary(self, o, lib.kiln_remainder, None)

    def __rmod__(self, o: Any) -> "Tensor":
        return _rbinary(self, o, lib.kiln_remainder)

    def __matmul__(self, o: "Tensor") -> "Tensor":
        if not isinstance(o, Tensor):
            return NotImplemented
        return _wrap(lib.kiln_matmul(_handle(self), _handle(o)),
                     self._rg or o._rg)

    def __rmatmul__(self, o: Any) -> "Tensor":
        return _rbinary(self, o, lib.kiln_matmul)

    def __eq__(self, o: Any) -> "Tensor":  # type: ignore[override]
        return _binary(self, o, lib.kiln_eq, lib.kiln_eq_scalar)

    def __ne__(self, o: Any) -> "Tensor":  # type: ignore[override]
        return _binary(self, o, lib.kiln_ne, lib.kiln_ne_scalar)

    def __lt__(self, o: Any) -> "Tensor":
        return _binary(self, o, lib.kiln_lt, lib.kiln_lt_scalar)

    def __le__(self, o: Any) -> "Tensor":
        return _binary(self, o, lib.kiln_le, lib.kiln_le_scalar)

    def __gt__(self, o: Any) -> "Tensor":
        return _binary(self, o, lib.kiln_gt, lib.kiln_gt_scalar)

    def __ge__(self, o: Any) -> "Tensor":
        return _binary(self, o, lib.kiln_ge, lib.kiln_ge_scalar)

    __hash__ = object.__hash__

    def _logical(self, o: Any, fn, name: str) -> "Tensor":
        other = _as_tensor(o, self)
        if self.dtype is not _dtype.bool_ or other.dtype is not _dtype.bool_:
            raise TypeError(f"kiln: {name} is defined for bool tensors only "
                            "(Kiln has no bitwise integer ops)")
        return _wrap(fn(self._h, other._h))

    def __and__(self, o: Any) -> "Tensor":
        return self._logical(o, lib.kiln_logical_and, "&")

    __rand__ = __and__

    def __or__(self, o: Any) -> "Tensor":
        return self._logical(o, lib.kiln_logical_or, "|")

    __ror__ = __or__

    def __xor__(self, o: Any) -> "Tensor":
        return self._logical(o, lib.kiln_logical_xor, "^")

    __rxor__ = __xor__

    def __invert__(self) -> "Tensor":
        if self.dtype is not _dtype.bool_:
            raise TypeError("kiln: ~ is defined for bool tensors only "
                            "(Kiln has no bitwise integer ops)")
        return _wrap(lib.kiln_logical_not(self._h))

    def __neg__(self) -> "Tensor":
        return _wrap(lib.kiln_neg(_handle(self)), self._rg)

    def __pos__(self) -> "Tensor":
        return self

    def __abs__(self) -> "Tensor":
        return _wrap(lib.kiln_abs(_handle(self)), self._rg)

    def matmul(self, other: "Tensor") -> "Tensor":
        """Matrix product with NumPy's batching rules."""
        return self.__matmul__(other)

    def __getitem__(self, key: Any) -> "Tensor":
        """t[key] with Torch's rules: ints, slices (step > 0), None and
        ... give a view sharing storage; integer/bool tensors, lists and
        arrays gather a copy (see kiln._index)."""
        from ._index import getitem
        return getitem(self, key)

    def __setitem__(self, key: Any, value: Any) -> None:
        """t[key] = value, written through the view into t's storage
        (kiln_copy_/fill_ for basic keys, kiln_index_put_ for advanced
        ones)."""
        from ._index import setitem
        setitem(self, key, value)

    def __iter__(self) -> Iterator["Tensor"]:
        for i in range(len(self)):
            yield self.select(0, i)


def _method_binary(name: str, scalar: bool):
    fn = getattr(lib, "kiln_" + name)
    fs = getattr(lib, "kiln_" + name + "_scalar") if scalar else None

    def method(self: Tensor, other: Any) -> Tensor:
        return _binary(self, other, fn, fs)
    method.__name__ = name
    method.__doc__ = f"Elementwise {name} with broadcasting (kiln_{name})."
    return method


def _method_unary(name: str, keeps_grad: bool = True):
    fn = getattr(lib, "kiln_" + name)

    def method(self: Tensor) -> Tensor:
        return _wrap(fn(_handle(self)), self._rg and keeps_grad)
    method.__name__ = name
    method.__doc__ = f"Elementwise {name} (kiln_{name})."
    return method


def _method_inplace(name: str):
    fn = getattr(lib, "kiln_" + name + "_")

    def method(self: Tensor) -> Tensor:
        check(fn(_handle(self)))
        return self
    method.__name__ = name + "_"
    method.__doc__ = f"In-place {name} through the view. Returns self."
    return method


UNARY = ("neg abs sign exp exp2 log log2 log1p expm1 sqrt rsqrt reciprocal "
         "sin cos tan tanh sigmoid relu gelu silu erf asin acos atan sinh "
         "cosh asinh acosh atanh floor ceil round trunc").split()
PREDICATES = "logical_not isnan isinf isfinite".split()
BINARY_SCALAR = "add sub mul div pow maximum minimum eq ne lt le gt ge".split()
BINARY = ("fmod remainder atan2 logical_and logical_or logical_xor mm bmm mv "
          "dot outer").split()
INPLACE_UNARY = [n for n in UNARY if n not in ("gelu", "silu")]

for _n in UNARY:
    setattr(Tensor, _n, _method_unary(_n))
for _n in PREDICATES:
    setattr(Tensor, _n, _method_unary(_n, False))
for _n in BINARY_SCALAR:
    setattr(Tensor, _n, _method_binary(_n, True))
for _n in BINARY:
    setattr(Tensor, _n, _method_binary(_n, False))
for _n in INPLACE_UNARY:
    setattr(Tensor, _n + "_", _method_inplace(_n))
Tensor.greater = Tensor.gt  # type: ignore[attr-defined]
Tensor.less = Tensor.lt  # type: ignore[attr-defined]
Tensor.multiply = Tensor.mul  # type: ignore[attr-defined]
Tensor.divide = Tensor.div  # type: ignore[attr-defined]
