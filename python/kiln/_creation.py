"""Creating tensors: from Python data (copied), from NumPy arrays (shared,
zero-copy), filled, ranges and random; and the module-level functions that
take several tensors (force, cat, stack, where)."""
from __future__ import annotations

import ctypes
import itertools
import numbers
import threading
from typing import Any, Dict, Optional, Sequence

import numpy as np

from . import _dtype
from ._errors import check
from ._lib import DELETER, immortal, lib
from ._tensor import Tensor, _handle, _i64s, _sizes, _wrap

DtypeLike = Any


def _code(dtype: DtypeLike, default: Optional[int] = None) -> int:
    if dtype is None:
        return lib.kiln_default_dtype() if default is None else default
    return _dtype.as_dtype(dtype).code


def _finish(t: Tensor, requires_grad: bool) -> Tensor:
    if requires_grad:
        t.requires_grad_(True)
    return t


def tensor(data: Any, dtype: DtypeLike = None,
           requires_grad: bool = False) -> Tensor:
    """A new tensor holding a copy of `data` (nested lists, numbers, a
    NumPy array or a Tensor). Without `dtype`: Python floats give the
    default float dtype, ints int64, bools bool; a NumPy array keeps its
    dtype. Torch: torch.tensor."""
    if isinstance(data, Tensor):
        t = data.detach().clone()
        return _finish(t if dtype is None else t.to(dtype), requires_grad)
    is_np = isinstance(data, (np.ndarray, np.generic))
    arr = np.asarray(data)
    if dtype is not None:
        d = _dtype.as_dtype(dtype)
        if d.np is None:  # bfloat16: through float32
            return _finish(tensor(arr.astype(np.float32)).to(d),
                           requires_grad)
        arr = arr.astype(d.np)
    elif arr.dtype.kind == "f" and not is_np:
        arr = arr.astype(_dtype.BY_CODE[lib.kiln_default_dtype()].np
                         or np.float32)
    elif arr.dtype.kind in "iu" and not is_np:
        arr = arr.astype(np.int64)
    d = _dtype.from_numpy_dtype(arr.dtype)
    if not arr.flags.c_contiguous:  # (ascontiguousarray makes 0-d 1-d)
        arr = arr.copy(order="C")
    s = arr.shape
    return _finish(_wrap(lib.kiln_from_data(d.code, len(s), _i64s(s),
                                            arr.ctypes.data)),
                   requires_grad)


def _filled(fn, sizes, dtype: DtypeLike, requires_grad: bool,
            *extra: Any) -> Tensor:
    s = _sizes(sizes)
    return _finish(_wrap(fn(_code(dtype), len(s), _i64s(s), *extra)),
                   requires_grad)


def zeros(*sizes: Any, dtype: DtypeLike = None,
          requires_grad: bool = False) -> Tensor:
    """A tensor of zeros; sizes as zeros(2, 3) or zeros((2, 3))."""
    return _filled(lib.kiln_zeros, sizes, dtype, requires_grad)


def ones(*sizes: Any, dtype: DtypeLike = None,
         requires_grad: bool = False) -> Tensor:
    """A tensor of ones."""
    return _filled(lib.kiln_ones, sizes, dtype, requires_grad)


def empty(*sizes: Any, dtype: DtypeLike = None,
          requires_grad: bool = False) -> Tensor:
    """A tensor whose values are unspecified (Kiln gives zeros)."""
    return _filled(lib.kiln_empty, sizes, dtype, requires_grad)


def full(size: Sequence[int], fill_value: float, dtype: DtypeLike = None,
         requires_grad: bool = False) -> Tensor:
    """A tensor of `size` filled with `fill_value`. Without `dtype`: bool,
    int64 or the default float dtype after fill_value's type, as Torch."""
    if dtype is None:
        dtype = (_dtype.bool_ if isinstance(fill_value, bool) else
                 _dtype.int64 if isinstance(fill_value, numbers.Integral)
                 else None)
    return _filled(lib.kiln_full, (tuple(size),), dtype, requires_grad,
                   float(fill_value))


def rand(*sizes: Any, dtype: DtypeLike = None,
         requires_grad: bool = False) -> Tensor:
    """Uniform random values in [0, 1) (Kiln's generator: kiln.manual_seed;
    not Torch's stream)."""
    return _filled(lib.kiln_rand, sizes, dtype, requires_grad)


def randn(*sizes: Any, dtype: DtypeLike = None,
          requires_grad: bool = False) -> Tensor:
    """Standard normal random values (Kiln's generator)."""
    return _filled(lib.kiln_randn, sizes, dtype, requires_grad)


def manual_seed(seed: int) -> None:
    """Seeds Kiln's random generator (kiln_manual_seed)."""
    lib.kiln_manual_seed(int(seed) & 0xFFFFFFFFFFFFFFFF)


def arange(start: float, end: Optional[float] = None, step: float = 1,
           dtype: DtypeLike = None, requires_grad: bool = False) -> Tensor:
    """Values start, start+step, ... below end (arange(n): 0..n-1).
    Without dtype: int64 when every argument is an int, else the default
    float dtype, as Torch."""
    if end is None:
        start, end = 0, start
    if dtype is None and all(isinstance(v, numbers.Integral)
                             for v in (start, end, step)):
        dtype = _dtype.int64
    return _finish(_wrap(lib.kiln_arange(_code(dtype), float(start),
                                         float(end), float(step))),
                   requires_grad)


def linspace(start: float, end: float, steps: int,
             dtype: DtypeLike = None) -> Tensor:
    """`steps` evenly spaced values from start to end inclusive."""
    return _wrap(lib.kiln_linspace(_code(dtype), float(start), float(end),
                                   int(steps)))


def eye(n: int, m: Optional[int] = None, dtype: DtypeLike = None) -> Tensor:
    """An n x m identity matrix."""
    return _wrap(lib.kiln_eye(_code(dtype), n, n if m is None else m))


def zeros_like(t: Tensor) -> Tensor:
    """Zeros with t's sizes and dtype."""
    return _wrap(lib.kiln_full_like(_handle(t), 0.0))


def ones_like(t: Tensor) -> Tensor:
    """Ones with t's sizes and dtype."""
    return _wrap(lib.kiln_full_like(_handle(t), 1.0))


def full_like(t: Tensor, fill_value: float) -> Tensor:
    """`fill_value` with t's sizes and dtype."""
    return _wrap(lib.kiln_full_like(_handle(t), float(fill_value)))


# ------------------------------------------------------ NumPy, zero-copy

# ctx id -> the NumPy array a kiln_from_blob storage wraps; the deleter
# drops it when Kiln's last user of the storage is gone.
_owners: Dict[int, np.ndarray] = {}
_owners_lock = threading.Lock()
_next_id = itertools.count(1)


def _release_owner(data: int, ctx: int, _owners=_owners,
                   _lock=_owners_lock) -> None:
    with _lock:
        _owners.pop(ctx or 0, None)


_deleter = immortal(DELETER(_release_owner))


def from_numpy(array: np.ndarray) -> Tensor:
    """A tensor over `array`'s memory (no copy): writes through either are
    seen by the other (Kiln's once forced). The array is kept alive until
    Kiln no longer uses the storage. Needs a writable array with
    non-negative strides that are multiples of its itemsize (ValueError
    otherwise); a dtype Kiln lacks is TypeError. Torch: torch.from_numpy."""
    if not isinstance(array, np.ndarray):
        raise TypeError(f"kiln.from_numpy: expected np.ndarray, got "
                        f"{type(array).__name__}")
    d = _dtype.from_numpy_dtype(array.dtype)
    if not array.flags.writeable:
        raise ValueError("kiln.from_numpy: the array is not writable "
                         "(Kiln may write into it); pass a copy")
    item = array.itemsize
    if any(s < 0 or s % item for s in array.strides):
        raise ValueError("kiln.from_numpy: negative or unaligned strides "
                         f"{array.strides} are not supported; pass a copy")
    shape = array.shape
    strides = tuple(s // item for s in array.strides)
    ctx = next(_next_id)
    with _owners_lock:
        _owners[ctx] = array
    h = lib.kiln_from_blob(d.code, len(shape), _i64s(shape), _i64s(strides),
                           array.ctypes.data, _deleter, ctx)
    if not h:
        with _owners_lock:
            _owners.pop(ctx, None)
    return _wrap(h)


# --------------------------------------------------- several tensors

def _handles(ts: Sequence[Tensor]):
    return (ctypes.c_void_p * len(ts))(*[_handle(t) for t in ts])


def force(*tensors: Tensor) -> None:
    """Computes the tensors together in one schedule (kiln_realize_many):
    shared work runs once."""
    if tensors:
        check(lib.kiln_realize_many(_handles(tensors), len(tensors)))


def cat(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """The tensors joined along `dim`."""
    ts = list(tensors)
    return _wrap(lib.kiln_cat(_handles(ts), len(ts), dim),
                 any(t.requires_grad for t in ts))


def stack(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """The tensors stacked along a new dim `dim`."""
    ts = list(tensors)
    return _wrap(lib.kiln_stack(_handles(ts), len(ts), dim),
                 any(t.requires_grad for t in ts))


def where(cond: Tensor, a: Any, b: Any) -> Tensor:
    """Elements of a where cond, else of b (broadcast)."""
    from ._tensor import _as_tensor
    a = _as_tensor(a, b if isinstance(b, Tensor) else cond)
    b = _as_tensor(b, a)
    return _wrap(lib.kiln_where(_handle(cond), _handle(a), _handle(b)),
                 a.requires_grad or b.requires_grad)
