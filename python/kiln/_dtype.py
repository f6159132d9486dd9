"""Kiln's dtypes as Python objects (`kiln.float32`...), with their NumPy
and Torch names. A dtype is a small immutable object; `int(d)` is the
kiln_dtype enum value."""
from __future__ import annotations

from typing import Any, Dict

import numpy as np


class dtype:
    """A Kiln element type, e.g. kiln.float32 (kiln_dtype KILN_F32)."""

    __slots__ = ("code", "name", "is_floating_point", "itemsize", "np")

    def __init__(self, code: int, name: str, is_float: bool, itemsize: int,
                 np_dtype: Any) -> None:
        self.code = code
        self.name = name
        self.is_floating_point = is_float
        self.itemsize = itemsize
        self.np = np.dtype(np_dtype) if np_dtype is not None else None

    def __int__(self) -> int:
        return self.code

    def __repr__(self) -> str:
        return "kiln." + self.name

    def __reduce__(self) -> str:
        return self.name


bool_ = dtype(0, "bool", False, 1, np.bool_)
uint8 = dtype(1, "uint8", False, 1, np.uint8)
int8 = dtype(2, "int8", False, 1, np.int8)
int16 = dtype(3, "int16", False, 2, np.int16)
int32 = dtype(4, "int32", False, 4, np.int32)
int64 = dtype(5, "int64", False, 8, np.int64)
float16 = dtype(6, "float16", True, 2, np.float16)
bfloat16 = dtype(7, "bfloat16", True, 2, None)  # no NumPy dtype
float32 = dtype(8, "float32", True, 4, np.float32)
float64 = dtype(9, "float64", True, 8, np.float64)

#: kiln_dtype code -> dtype object.
BY_CODE = (bool_, uint8, int8, int16, int32, int64, float16, bfloat16,
           float32, float64)
_BY_NP: Dict[np.dtype, dtype] = {d.np: d for d in BY_CODE if d.np is not None}


def from_numpy_dtype(d: Any) -> dtype:
    """The Kiln dtype of a NumPy dtype; TypeError for one Kiln lacks."""
    try:
        return _BY_NP[np.dtype(d)]
    except KeyError:
        raise TypeError(f"kiln: NumPy dtype {np.dtype(d)} has no Kiln "
                        "dtype") from None


def as_dtype(d: Any) -> dtype:
    """A dtype from a kiln.dtype, a NumPy dtype/type, a name ("float32") or
    a torch dtype."""
    if isinstance(d, dtype):
        return d
    if d is bool:
        return bool_
    if d is int:
        return int64
    if d is float:
        return float32
    if isinstance(d, str) or type(d).__module__ == "torch":
        name = str(d).replace("torch.", "")
        name = {"bool": "bool_", "float": "float32", "double": "float64",
                "half": "float16", "long": "int64", "int": "int32"}.get(
                    name, name)
        if name == "bool_":
            return bool_
        for k in BY_CODE:
            if k.name == name:
                return k
        raise TypeError(f"kiln: unknown dtype {d!r}")
    return from_numpy_dtype(d)
