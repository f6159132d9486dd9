"""Finding and loading libkiln, and the ctypes declarations of the C
functions the package calls.

Discovery order (the first that exists wins):
  1. env KILN_LIBRARY: the path of the shared library itself (one that
     does not exist is an ImportError, not a fall-back);
  2. env KILN_BUILD_DIR: a CMake build tree holding libkiln.so;
  3. the build tree next to the package's source (``<repo>/build``), so a
     checkout works with ``PYTHONPATH=<repo>/python`` after the build;
  4. the installed library: ``ctypes.util.find_library("kiln")``, then
     ``pkg-config --variable=libdir kiln``.

Every declared function gets argtypes and restype from SIGNATURES, so a
wrong Python argument is a ctypes error instead of undefined behaviour.
Tensor handles travel as ``c_void_p`` (Python ints; 0/None is NULL).

Threads: the library is loaded with ctypes.PyDLL, so every call holds the
GIL. Kiln allows one thread at a time on a pending tensor and on every
tensor over its storage (docs/api.md, "Threads"); holding the GIL makes
each Kiln call from any Python thread exclusive, so Python threads sharing
tensors cannot race inside Kiln (with CDLL, which releases the GIL, four
threads writing one storage crashed the interpreter). The cost: a long
force blocks the other Python threads, as a global lock would.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import shutil
import subprocess
from ctypes import (POINTER, c_bool, c_char_p, c_double, c_int, c_int64,
                    c_size_t, c_uint64, c_void_p)
from typing import Any, Dict, List, Optional, Tuple

_NAMES = ("libkiln.so", "libkiln.dylib")

# Codes: T tensor*  v void  i int  l int64  u uint64  d double  b bool
#        n size_t  z const char*  p void*  L int64_t*  I int*  A tensor**
#        F the from_blob deleter
_CODES = {"T": c_void_p, "v": None, "i": c_int, "l": c_int64, "u": c_uint64,
          "d": c_double, "b": c_bool, "n": c_size_t, "z": c_char_p,
          "p": c_void_p, "L": POINTER(c_int64), "I": POINTER(c_int),
          "A": POINTER(c_void_p), "Z": POINTER(c_char_p)}

#: The deleter type of kiln_from_blob: void (*)(void *data, void *ctx).
DELETER = ctypes.CFUNCTYPE(None, c_void_p, c_void_p)
_CODES["F"] = DELETER

_UNARY = ("neg abs sign exp exp2 log log2 log1p expm1 sqrt rsqrt reciprocal "
          "sin cos tan tanh sigmoid relu gelu silu erf asin acos atan sinh "
          "cosh asinh acosh atanh floor ceil round trunc logical_not isnan "
          "isinf isfinite t squeeze contiguous clone detach").split()
_BINARY = ("add sub mul div pow maximum minimum fmod remainder atan2 eq ne lt "
           "le gt ge logical_and logical_or logical_xor matmul mm bmm mv dot "
           "outer expand_as view_as").split()
_SCALAR = "add sub mul div pow maximum minimum eq ne lt le gt ge".split()
_INPLACE_BIN = "add sub mul div pow fmod remainder atan2".split()
_INPLACE_UN = ("neg abs sign exp exp2 log log2 log1p expm1 sqrt rsqrt "
               "reciprocal sin cos tan tanh sigmoid relu erf floor ceil round "
               "trunc asin acos atan sinh cosh asinh acosh atanh zero").split()
_REDUCE = "sum mean prod amax amin all any logsumexp".split()

SIGNATURES: Dict[str, Tuple[str, str]] = {
    "retain": ("T", "T"), "release": ("v", "T"),
    "last_error": ("z", ""), "last_status": ("i", ""),
    "clear_error": ("v", ""), "status_name": ("z", "i"),
    "dtype_size": ("n", "i"), "default_dtype": ("i", ""),
    "set_default_dtype": ("i", "i"),
    "empty": ("T", "iiL"), "zeros": ("T", "iiL"), "ones": ("T", "iiL"),
    "full": ("T", "iiLd"), "scalar": ("T", "id"), "arange": ("T", "iddd"),
    "linspace": ("T", "iddl"), "manual_seed": ("v", "u"),
    "rand": ("T", "iiL"), "randn": ("T", "iiL"), "randint": ("T", "illiL"),
    "eye": ("T", "ill"), "full_like": ("T", "Td"),
    "from_data": ("T", "iiLp"), "from_blob": ("T", "iiLLpFp"),
    "dim": ("i", "T"), "sizes": ("L", "T"), "strides": ("L", "T"),
    "storage_offset": ("l", "T"), "numel": ("l", "T"),
    "dtype_of": ("i", "T"), "device_of": ("i", "T"),
    "is_contiguous": ("b", "T"),
    "narrow": ("T", "Till"), "select": ("T", "Til"),
    "slice": ("T", "Tilll"), "transpose": ("T", "Tii"),
    "permute": ("T", "TiI"), "expand": ("T", "TiL"), "view": ("T", "TiL"),
    "reshape": ("T", "TiL"), "squeeze_dim": ("T", "Ti"),
    "unsqueeze": ("T", "Ti"), "flatten": ("T", "Tii"),
    "unfold": ("T", "Till"), "to_dtype": ("T", "Ti"),
    "copy_": ("i", "TT"), "fill_": ("i", "Td"),
    "where": ("T", "TTT"), "clamp": ("T", "Tdd"),
    "argmax": ("T", "Tib"), "argmin": ("T", "Tib"),
    "var": ("T", "TiIib"), "std": ("T", "TiIib"), "norm": ("T", "TdiIb"),
    "cumsum": ("T", "Ti"), "cumprod": ("T", "Ti"),
    "max": ("i", "TibAA"), "min": ("i", "TibAA"),
    "softmax": ("T", "Ti"), "log_softmax": ("T", "Ti"),
    "index_select": ("T", "TiT"), "masked_select": ("T", "TT"),
    "masked_fill_": ("i", "TTd"), "nonzero": ("T", "T"),
    "index_put_": ("i", "TiATb"),
    "grad": ("i", "AAiAiA"),
    # nn.h: layers, losses, init
    "linear": ("T", "TTT"), "conv": ("T", "TTTiLLLl"),
    "max_pool": ("T", "TiLLLLb"), "avg_pool": ("T", "TiLLLbb"),
    "batch_norm": ("T", "TTTTTbdd"), "layer_norm": ("T", "TiTTd"),
    "embedding": ("T", "TT"), "dropout": ("T", "Tdb"),
    "leaky_relu": ("T", "Td"),
    "cross_entropy": ("T", "TTid"), "nll_loss": ("T", "TTi"),
    "mse_loss": ("T", "TTi"), "l1_loss": ("T", "TTi"),
    "binary_cross_entropy": ("T", "TTTi"),
    "binary_cross_entropy_with_logits": ("T", "TTTTi"),
    "kaiming_uniform_": ("i", "Tdii"), "uniform_": ("i", "Tdd"),
    "normal_": ("i", "Tdd"),
    # optimizers
    "sgd": ("p", "Aidddb"), "adam": ("p", "Aidddddb"),
    "optimizer_step": ("i", "pA"), "optimizer_set_lr": ("i", "pd"),
    "optimizer_lr": ("d", "p"), "optimizer_save": ("i", "pz"),
    "optimizer_load": ("i", "pz"), "optimizer_free": ("v", "p"),
    # files
    "save_safetensors": ("i", "ziZA"), "load_safetensors": ("i", "zIpp"),
    "safetensors_free": ("v", "ipp"),
    # profile.h
    "profile_begin": ("v", ""), "profile_end": ("v", ""),
    "profile_count": ("i", ""), "profile_print": ("i", "p"),
    "profile_write_trace": ("i", "z"),
    "cat": ("T", "Aii"), "stack": ("T", "Aii"),
    "realize": ("i", "T"), "realize_many": ("i", "Ai"),
    "read": ("i", "Tpn"), "item_f64": ("i", "Tp"), "data": ("p", "T"),
}
for _n in _UNARY:
    SIGNATURES[_n] = ("T", "T")
for _n in _BINARY:
    SIGNATURES[_n] = ("T", "TT")
for _n in _SCALAR:
    SIGNATURES[_n + "_scalar"] = ("T", "Td")
for _n in _INPLACE_BIN:
    SIGNATURES[_n + "_"] = ("i", "TT")
    if _n in _SCALAR:
        SIGNATURES[_n + "_scalar_"] = ("i", "Td")
for _n in _INPLACE_UN:
    SIGNATURES[_n + "_"] = ("i", "T")
for _n in _REDUCE:
    SIGNATURES[_n] = ("T", "TiIb")


def immortal(callback: Any) -> Any:
    """Returns `callback` (a ctypes function pointer object) with one
    reference leaked on purpose: C code (Kiln's from_blob deleters, a DLPack
    consumer such as torch) may call it while the interpreter finalizes,
    after the module that made it was cleared; its thunk must not be freed
    then. Callbacks also take what they use as default arguments, for the
    same reason."""
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(callback))
    return callback


def _candidates() -> List[str]:
    """Paths to try, in discovery order (see the module docstring)."""
    out: List[str] = []
    env = os.environ.get("KILN_LIBRARY")
    if env:
        out.append(env)
    dirs = []
    if os.environ.get("KILN_BUILD_DIR"):
        dirs.append(os.environ["KILN_BUILD_DIR"])
    here = os.path.dirname(os.path.abspath(__file__))
    dirs.append(os.path.normpath(os.path.join(here, os.pardir, os.pardir,
                                              "build")))
    out += [os.path.join(d, n) for d in dirs for n in _NAMES]
    found = ctypes.util.find_library("kiln")
    if found:
        out.append(found)
    if shutil.which("pkg-config"):
        try:
            libdir = subprocess.run(
                ["pkg-config", "--variable=libdir", "kiln"],
                capture_output=True, text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            libdir = ""
        if libdir:
            out += [os.path.join(libdir, n) for n in _NAMES]
    return out


def find_library() -> str:
    """The path of the libkiln that the package loads; ImportError naming
    every place tried when there is none."""
    env = os.environ.get("KILN_LIBRARY")
    if env and not os.path.exists(env):
        raise ImportError(f"kiln: KILN_LIBRARY={env} does not exist")
    tried = _candidates()
    for path in tried:
        if os.sep not in path or os.path.exists(path):
            return path
    raise ImportError("kiln: libkiln not found; set KILN_LIBRARY to the "
                      "library or KILN_BUILD_DIR to the build tree (tried "
                      + ", ".join(tried) + ")")


def _declare(lib: ctypes.CDLL) -> None:
    for name, (ret, args) in SIGNATURES.items():
        fn = getattr(lib, "kiln_" + name)
        fn.restype = _CODES[ret]
        fn.argtypes = [_CODES[c] for c in args]


def load(path: Optional[str] = None) -> ctypes.CDLL:
    """Loads libkiln (from `path`, else find_library()) with the GIL held
    during calls (see the module docstring) and declares the functions the
    package uses."""
    lib = ctypes.PyDLL(path or find_library())
    _declare(lib)
    return lib


lib = load()
path = lib._name
