"""DLPack: sharing memory with other frameworks (PyTorch, NumPy >= 1.22,
JAX, CuPy...) without a copy, over the public C API only.

Export (Tensor.__dlpack__): the tensor is forced and its buffer described
by a DLManagedTensor (kiln_data's pointer, the view's sizes and strides)
in a "dltensor" PyCapsule. The capsule owns a new Kiln reference to the
tensor (so the storage, which keeps one buffer for its life, stays); the
consumer's call of the DLManagedTensor's deleter drops it, or the
capsule's destructor when nobody consumed it.

Import (kiln.from_dlpack): the producer's DLManagedTensor is wrapped with
kiln_from_blob, whose deleter calls the producer's deleter when Kiln's
last user of the storage is gone; the capsule is renamed "used_dltensor"
as the protocol asks. CPU memory only (KILN_CUDA tensors are not
exported; a device other than kDLCPU is refused with ValueError).
"""
from __future__ import annotations

import ctypes
import itertools
import threading
from ctypes import (POINTER, Structure, c_int32, c_int64, c_uint8, c_uint16,
                    c_uint64, c_void_p)
from typing import Any, Dict, Tuple

from ._lib import DELETER, immortal, lib
from ._tensor import Tensor, _handle, _i64s, _wrap

KDLCPU = 1
# DLDataTypeCode: kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4, kDLBool 6.
_TO_DL = {0: (6, 8), 1: (1, 8), 2: (0, 8), 3: (0, 16), 4: (0, 32),
          5: (0, 64), 6: (2, 16), 7: (4, 16), 8: (2, 32), 9: (2, 64)}
_FROM_DL = {v: k for k, v in _TO_DL.items()}
_FROM_DL[(1, 1)] = 0  # bool as 1-bit unsigned (some producers)


class DLDevice(Structure):
    _fields_ = [("device_type", c_int32), ("device_id", c_int32)]


class DLDataType(Structure):
    _fields_ = [("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16)]


class DLTensor(Structure):
    _fields_ = [("data", c_void_p), ("device", DLDevice), ("ndim", c_int32),
                ("dtype", DLDataType), ("shape", POINTER(c_int64)),
                ("strides", POINTER(c_int64)), ("byte_offset", c_uint64)]


class DLManagedTensor(Structure):
    pass


_MANAGED_DELETER = ctypes.CFUNCTYPE(None, POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [("dl_tensor", DLTensor),
                            ("manager_ctx", c_void_p),
                            ("deleter", _MANAGED_DELETER)]

_capi = ctypes.pythonapi
_CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, c_void_p)
_capi.PyCapsule_New.restype = ctypes.py_object
_capi.PyCapsule_New.argtypes = [c_void_p, ctypes.c_char_p,
                                _CAPSULE_DESTRUCTOR]
_capi.PyCapsule_IsValid.restype = ctypes.c_int
_capi.PyCapsule_IsValid.argtypes = [c_void_p, ctypes.c_char_p]
_capi.PyCapsule_GetPointer.restype = c_void_p
_capi.PyCapsule_GetPointer.argtypes = [c_void_p, ctypes.c_char_p]
_capi.PyCapsule_SetName.restype = ctypes.c_int
_capi.PyCapsule_SetName.argtypes = [c_void_p, ctypes.c_char_p]

# Exports alive: DLManagedTensor address -> (struct, shape, strides, the
# Tensor whose reference the consumer holds).
_exports: Dict[int, Tuple[Any, Any, Any, Tensor]] = {}
# Imports alive: ctx id -> the producer's capsule-owned DLManagedTensor*.
_imports: Dict[int, int] = {}
_lock = threading.Lock()
_next = itertools.count(1)


def _pop_export(addr: int, _exports=_exports, _lock=_lock) -> Any:
    """Takes an export's entry out of the registry. The caller drops it
    after the lock is released: dropping the Tensor runs kiln_release,
    which may run another deleter that takes the lock."""
    with _lock:
        return _exports.pop(addr, None)


def _export_deleter(managed, _pop=_pop_export, _cast=ctypes.cast,
                    _vp=c_void_p) -> None:
    _pop(_cast(managed, _vp).value)    # drops the Tensor: kiln_release


_export_deleter_c = immortal(_MANAGED_DELETER(_export_deleter))


def _capsule_destructor(capsule: int, _capi=_capi,
                        _pop=_pop_export) -> None:
    if _capi.PyCapsule_IsValid(capsule, b"dltensor"):  # never consumed
        _pop(_capi.PyCapsule_GetPointer(capsule, b"dltensor"))


_capsule_destructor_c = immortal(_CAPSULE_DESTRUCTOR(_capsule_destructor))


def to_dlpack(t: Tensor) -> Any:
    """A "dltensor" PyCapsule sharing t's memory (forces t). See the module
    docstring for ownership. Torch: torch.utils.dlpack.to_dlpack."""
    d = t.dtype
    if t.device != "cpu":
        raise ValueError("kiln: DLPack export of a CUDA tensor is not "
                         "supported; .to_device(cpu) first")
    keep = t.detach()                  # its own reference, for the consumer
    ptr = lib.kiln_data(_handle(keep)) if keep.numel() else 0
    if keep.numel() and not ptr:
        from ._errors import take_error
        raise take_error()
    shape = keep.shape
    m = DLManagedTensor()
    shp = _i64s(shape)
    strd = _i64s(keep.stride())
    code, bits = _TO_DL[d.code]
    m.dl_tensor.data = ptr or None
    m.dl_tensor.device = DLDevice(KDLCPU, 0)
    m.dl_tensor.ndim = len(shape)
    m.dl_tensor.dtype = DLDataType(code, bits, 1)
    m.dl_tensor.shape = ctypes.cast(shp, POINTER(c_int64))
    m.dl_tensor.strides = ctypes.cast(strd, POINTER(c_int64))
    m.dl_tensor.byte_offset = 0
    m.deleter = _export_deleter_c
    addr = ctypes.addressof(m)
    with _lock:
        _exports[addr] = (m, shp, strd, keep)
    return _capi.PyCapsule_New(addr, b"dltensor", _capsule_destructor_c)


def _import_deleter(data: int, ctx: int, _imports=_imports, _lock=_lock,
                    _m=DLManagedTensor, _cast=ctypes.cast,
                    _ptr=POINTER(DLManagedTensor)) -> None:
    with _lock:
        addr = _imports.pop(ctx or 0, None)
    if addr:
        m = _m.from_address(addr)
        if m.deleter:
            m.deleter(_cast(addr, _ptr))


_import_deleter_c = immortal(DELETER(_import_deleter))


def from_dlpack(obj: Any) -> Tensor:
    """A tensor sharing the memory of `obj` (an object with __dlpack__,
    e.g. a torch.Tensor or NumPy array, or a "dltensor" capsule): writes
    through either are seen by the other (Kiln's once forced). CPU memory
    only (ValueError otherwise); negative strides and dtypes Kiln lacks
    are ValueError/TypeError. Torch: torch.from_dlpack."""
    capsule = obj.__dlpack__() if hasattr(obj, "__dlpack__") else obj
    cap = ctypes.py_object(capsule)
    cap_ptr = ctypes.cast(ctypes.pointer(cap), POINTER(c_void_p))[0]
    if not _capi.PyCapsule_IsValid(cap_ptr, b"dltensor"):
        raise ValueError("kiln.from_dlpack: not an unconsumed DLPack "
                         "capsule")
    addr = _capi.PyCapsule_GetPointer(cap_ptr, b"dltensor")
    m = DLManagedTensor.from_address(addr)
    dl = m.dl_tensor
    if dl.device.device_type != KDLCPU:
        raise ValueError(f"kiln.from_dlpack: device type "
                         f"{dl.device.device_type} is not the CPU (1)")
    key = (dl.dtype.code, dl.dtype.bits)
    if key not in _FROM_DL or dl.dtype.lanes != 1:
        raise TypeError(f"kiln.from_dlpack: DLPack dtype code {key[0]}, "
                        f"{key[1]} bits, {dl.dtype.lanes} lanes has no Kiln "
                        "dtype")
    code = _FROM_DL[key]
    n = dl.ndim
    shape = [dl.shape[i] for i in range(n)]
    strides = ([dl.strides[i] for i in range(n)] if dl.strides
               else None)
    if strides and any(s < 0 for s in strides):
        raise ValueError("kiln.from_dlpack: negative strides are not "
                         "supported")
    data = (dl.data or 0) + dl.byte_offset
    ctx = next(_next)
    _capi.PyCapsule_SetName(cap_ptr, b"used_dltensor")
    with _lock:
        _imports[ctx] = addr
    h = lib.kiln_from_blob(code, n, _i64s(shape),
                           _i64s(strides) if strides else None,
                           data or None, _import_deleter_c, ctx)
    if not h:
        _import_deleter(0, ctx)
    t = _wrap(h)
    del capsule
    return t
