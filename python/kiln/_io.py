"""Saving and loading tensors as safetensors files (kiln_save_safetensors,
kiln_load_safetensors): the format Module.state_dict and the optimizers'
state use."""
from __future__ import annotations

import ctypes
import os
from typing import Dict, Mapping

from ._errors import check
from ._lib import lib
from ._tensor import Tensor, _handle, _wrap


def save(tensors: Mapping[str, Tensor], path: "os.PathLike[str] | str"
         ) -> None:
    """Writes the named tensors to a safetensors file at `path` (forces
    them; each view written row-major). Torch: torch.save of a state_dict
    (safetensors.torch.save_file)."""
    names = list(tensors)
    ts = [tensors[n] for n in names]
    arr_n = (ctypes.c_char_p * len(names))(*[n.encode() for n in names])
    arr_t = (ctypes.c_void_p * len(ts))(*[_handle(t) for t in ts])
    check(lib.kiln_save_safetensors(os.fsencode(path), len(ts), arr_n,
                                    arr_t))


def load(path: "os.PathLike[str] | str") -> Dict[str, Tensor]:
    """The tensors of a safetensors file, by name, in file order. Torch:
    torch.load of a state_dict (safetensors.torch.load_file)."""
    n = ctypes.c_int()
    names = ctypes.POINTER(ctypes.c_char_p)()
    handles = ctypes.POINTER(ctypes.c_void_p)()
    check(lib.kiln_load_safetensors(os.fsencode(path), ctypes.byref(n),
                                    ctypes.byref(names),
                                    ctypes.byref(handles)))
    out: Dict[str, Tensor] = {}
    try:
        for i in range(n.value):
            h = lib.kiln_retain(handles[i])  # ours; the list's is freed
            out[names[i].decode()] = _wrap(h)
    finally:
        lib.kiln_safetensors_free(n.value, names, handles)
    return out
