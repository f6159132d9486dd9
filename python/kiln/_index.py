"""t[key] and t[key] = value with Torch's (NumPy's) indexing rules, over
Kiln's views and index ops.

Basic indexing (ints, slices with step > 0, None, Ellipsis) gives a view
(kiln_select, kiln_slice, kiln_unsqueeze): it shares t's storage, and
writing into it writes into t. Advanced indexing (integer tensors, lists,
NumPy arrays, bool masks) gathers a new tensor: the indexed dims are
permuted to the front of the basic view, flattened, and read with
kiln_index_select at the linear index; a bool mask stands for the index
tensors of its nonzero() (forced, as in Torch). The result's indexed dims
sit where the first index was when the indices are adjacent, else in
front (NumPy's rule). Assignment with advanced indices is
kiln_index_put_ through the permuted view (kiln_masked_fill_ for a whole
mask and a number).
"""
from __future__ import annotations

import numbers
from typing import Any, List, Sequence, Tuple

import numpy as np

from . import _dtype
from ._errors import check
from ._lib import lib
from ._tensor import Tensor, _as_tensor, _handle, _wrap

_INT64_MAX = 2**63 - 1


def _as_index(item: Any) -> Tensor:
    """An advanced index as a Tensor (int64 or bool)."""
    if isinstance(item, Tensor):
        return item
    from ._creation import tensor
    arr = np.asarray(item)
    if arr.dtype.kind not in "biu":
        raise IndexError("tensors used as indices must be long, int, byte "
                         "or bool tensors")
    return tensor(arr if arr.dtype.kind == "b" else arr.astype(np.int64))


def _expand_key(t: Tensor, key: Any) -> List[Any]:
    """The key as a list with Ellipsis replaced by full slices."""
    items = list(key) if isinstance(key, tuple) else [key]
    consumed = 0
    for it in items:
        if it is None or it is Ellipsis or isinstance(it, bool):
            continue
        if isinstance(it, (Tensor, np.ndarray)) and _is_mask(it):
            consumed += it.ndim
        else:
            consumed += 1
    n_ell = sum(1 for it in items if it is Ellipsis)
    if n_ell > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    fill = max(0, t.ndim - consumed)
    if consumed > t.ndim:
        raise IndexError(f"too many indices for tensor of dimension "
                         f"{t.ndim}")
    if n_ell:
        i = items.index(Ellipsis)
        items[i:i + 1] = [slice(None)] * fill
    return items


def _is_mask(it: Any) -> bool:
    if isinstance(it, Tensor):
        return it.dtype in (_dtype.bool_, _dtype.uint8)
    return isinstance(it, np.ndarray) and it.dtype.kind == "b"


def _slice(v: Tensor, dim: int, s: slice) -> Tensor:
    step = 1 if s.step is None else int(s.step)
    if step <= 0:
        raise ValueError("step must be greater than zero")
    start = 0 if s.start is None else int(s.start)
    stop = _INT64_MAX if s.stop is None else int(s.stop)
    return _wrap(lib.kiln_slice(_handle(v), dim, start, stop, step), v._rg)


def _basic(t: Tensor, key: Any) -> Tuple[Tensor, List[Tuple[int, Tensor]]]:
    """The view basic indexing gives, and the advanced indices as (dim of
    that view, int64 or mask Tensor) pairs, in key order."""
    v = t
    dim = 0
    adv: List[Tuple[int, Tensor]] = []
    for it in _expand_key(t, key):
        if it is None or it is True:
            v = v.unsqueeze(dim)
            dim += 1
        elif it is False:
            raise IndexError("kiln: indexing with False is not supported")
        elif isinstance(it, numbers.Integral) and not isinstance(
                it, (Tensor, np.ndarray)):
            v = _wrap(lib.kiln_select(_handle(v), dim, int(it)), v._rg)
        elif isinstance(it, slice):
            v = _slice(v, dim, it)
            dim += 1
        else:
            idx = _as_index(it)
            adv.append((dim, idx))
            dim += idx.ndim if _is_mask(idx) else 1
    return v, adv


def _mask_to_indices(adv: List[Tuple[int, Tensor]]
                     ) -> List[Tuple[int, Tensor]]:
    """Each k-d mask replaced by its k nonzero() index tensors."""
    out: List[Tuple[int, Tensor]] = []
    for d, idx in adv:
        if not _is_mask(idx):
            out.append((d, idx if idx.dtype is _dtype.int64
                        else idx.to(_dtype.int64)))
            continue
        if idx.ndim == 0:
            raise NotImplementedError("kiln: a 0-d mask index is not "
                                      "supported")
        nz = _wrap(lib.kiln_nonzero(_handle(idx)))
        for j in range(idx.ndim):
            out.append((d + j, nz.select(1, j)))
    return out


def _front(v: Tensor, dims: Sequence[int]) -> Tensor:
    """v with `dims` moved to the front, in that order (a view)."""
    rest = [d for d in range(v.ndim) if d not in dims]
    return v.permute(list(dims) + rest)


def _broadcast_shape(shapes: Sequence[Tuple[int, ...]]) -> Tuple[int, ...]:
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise IndexError("shape mismatch: indexing tensors could not be "
                         "broadcast together with shapes "
                         + " ".join(str(list(s)) for s in shapes)) from None


def _check_bounds(idxs: Sequence[Tensor], sizes: Sequence[int],
                  dims: Sequence[int]) -> None:
    for idx, n, d in zip(idxs, sizes, dims):
        if idx.numel() and bool(((idx >= n) | (idx < -n)).any()):
            bad = int(idx.numpy()[(idx.numpy() >= n)
                                  | (idx.numpy() < -n)].flat[0])
            raise IndexError(f"index {bad} is out of bounds for dimension "
                             f"{d} with size {n}")


def _gather(v: Tensor, adv: List[Tuple[int, Tensor]]) -> Tensor:
    dims = [d for d, _ in adv]
    idxs = [i for _, i in adv]
    w = _front(v, dims)
    m = len(dims)
    sizes = w.shape[:m]
    rest = w.shape[m:]
    bshape = _broadcast_shape([i.shape for i in idxs])
    if m > 1:
        _check_bounds(idxs, sizes, dims)
    lin = None
    for idx, n in zip(idxs, sizes):
        pos = idx + (idx < 0).long() * n
        lin = pos if lin is None else lin * n + pos
    lin = lin.expand(bshape) if lin.shape != bshape else lin
    flat = w.flatten(0, m - 1) if m > 1 else w
    lin = lin.reshape(-1)  # held: its handle must outlive the call
    r = _wrap(lib.kiln_index_select(_handle(flat), 0, _handle(lin)), v._rg)
    r = r.reshape(bshape + rest)
    adjacent = dims == list(range(dims[0], dims[0] + m))
    if adjacent and dims[0] > 0:
        nb = len(bshape)
        order = (list(range(nb, nb + dims[0])) + list(range(nb))
                 + list(range(nb + dims[0], r.ndim)))
        r = r.permute(order)
    return r


def getitem(t: Tensor, key: Any) -> Tensor:
    """t[key]: a view for basic keys, a gathered tensor for advanced ones."""
    if isinstance(key, (Tensor, np.ndarray)) and _is_mask(key) \
            and tuple(key.shape) == t.shape and t.ndim > 0:
        mask = key if isinstance(key, Tensor) else _as_index(key)
        return _wrap(lib.kiln_masked_select(_handle(t), _handle(mask)),
                     t._rg)
    v, adv = _basic(t, key)
    if not adv:
        return v
    return _gather(v, _mask_to_indices(adv))


def _value_like(v: Any, like: Tensor) -> Tensor:
    val = _as_tensor(v, like)
    if val.dtype is not like.dtype:
        val = val.to(like.dtype)
    return val


def _fit(val: Tensor, shape: Tuple[int, ...]) -> Tensor:
    """val broadcast to `shape` (leading size-1 dims dropped as Torch)."""
    while val.ndim > len(shape) and val.shape[0] == 1:
        val = val.squeeze(0)
    return val if val.shape == shape else val.expand(shape)


def setitem(t: Tensor, key: Any, value: Any) -> None:
    """t[key] = value, written through t's storage (lazy)."""
    if isinstance(key, (Tensor, np.ndarray)) and _is_mask(key) \
            and tuple(key.shape) == t.shape and t.ndim > 0 \
            and isinstance(value, numbers.Number):
        mask = key if isinstance(key, Tensor) else _as_index(key)
        check(lib.kiln_masked_fill_(_handle(t), _handle(mask),
                                    float(value)))
        return
    v, adv = _basic(t, key)
    if not adv:
        if isinstance(value, numbers.Number) and not isinstance(
                value, Tensor):
            v.fill_(value)
        else:
            v.copy_(_fit(_value_like(value, v), v.shape))
        return
    adv = _mask_to_indices(adv)
    dims = [d for d, _ in adv]
    idxs = [i for _, i in adv]
    w = _front(v, dims)
    m = len(dims)
    bshape = _broadcast_shape([i.shape for i in idxs])
    rest = w.shape[m:]
    val = _value_like(value, t)
    adjacent = dims == list(range(dims[0], dims[0] + m))
    if adjacent and dims[0] > 0:
        # Torch's result shape keeps the indexed dims in place: fit the
        # value to it, then move them to the front as w has them.
        p, nb = dims[0], len(bshape)
        shape = rest[:p] + bshape + rest[p:]
        val = _fit(val, shape)
        val = val.permute(list(range(p, p + nb)) + list(range(p))
                          + list(range(p + nb, len(shape))))
    else:
        val = _fit(val, bshape + rest)
    from ._creation import _handles
    check(lib.kiln_index_put_(_handle(w), m, _handles(idxs), _handle(val),
                              False))
