"""kiln_ctypes — a thin ctypes binding of Kiln's public C API (kiln.h).

The shared library is loaded from the environment variable KILN_LIB (CTest
sets it to the built libkiln.so); without it, build/libkiln.so next to the
source tree is tried.

Layers:
  * `lib` — the raw ctypes library: every function of kiln.h with argtypes
    and restype declared from the table SIGNATURES below.
  * module functions named after the C functions without the `kiln_`
    prefix (`narrow`, `add`, `sum`, ...): they take Tensor objects and Python
    sequences, fill in the `int ndim` / `int n` counts that precede an array
    argument, wrap returned tensors in `Tensor` (which owns the new
    reference) and raise `KilnError` — carrying kiln_last_error(), which is
    then cleared — when a call fails.
  * `Tensor` — owns one reference (released in __del__), with `shape`,
    `strides`, `offset`, `dtype`, `to_numpy()`, and every module function as
    a method (`t.narrow(0, 1, 3)`).

BF16 has no NumPy dtype: it travels as uint16 bit patterns (see
`bf16_bits_to_f32` / `f32_to_bf16_bits`, round to nearest even).
"""

import builtins
import ctypes
import os
from ctypes import (POINTER, c_bool, c_char_p, c_double, c_int, c_int64,
                    c_size_t, c_uint64, c_void_p)

import numpy as np

# --------------------------------------------------------------- dtypes

BOOL, U8, I8, I16, I32, I64, F16, BF16, F32, F64 = range(10)
DTYPE_COUNT = 10
ALL_DTYPES = list(range(DTYPE_COUNT))
INT_DTYPES = [U8, I8, I16, I32, I64]
FLOAT_DTYPES = [F16, BF16, F32, F64]
DTYPE_NAMES = {BOOL: "bool", U8: "u8", I8: "i8", I16: "i16", I32: "i32",
               I64: "i64", F16: "f16", BF16: "bf16", F32: "f32", F64: "f64"}
# The NumPy dtype each Kiln dtype is read into (BF16: raw uint16 bits).
NP_DTYPE = {BOOL: np.dtype(np.bool_), U8: np.dtype(np.uint8),
            I8: np.dtype(np.int8), I16: np.dtype(np.int16),
            I32: np.dtype(np.int32), I64: np.dtype(np.int64),
            F16: np.dtype(np.float16), BF16: np.dtype(np.uint16),
            F32: np.dtype(np.float32), F64: np.dtype(np.float64)}
FROM_NP = {np.dtype(np.bool_): BOOL, np.dtype(np.uint8): U8,
           np.dtype(np.int8): I8, np.dtype(np.int16): I16,
           np.dtype(np.int32): I32, np.dtype(np.int64): I64,
           np.dtype(np.float16): F16, np.dtype(np.float32): F32,
           np.dtype(np.float64): F64}

CPU, CUDA = 0, 1

# kiln_reduction (the losses)
REDUCTION_NONE, REDUCTION_MEAN, REDUCTION_SUM = 0, 1, 2
REDUCTION_BATCHMEAN = 3  # kl_div only

# kiln_status
OK = 0
PAD_CONSTANT, PAD_REFLECT, PAD_REPLICATE, PAD_CIRCULAR = 0, 1, 2, 3  # kiln_pad_mode
INTERP_NEAREST, INTERP_LINEAR = 0, 1  # kiln_interp_mode
# kiln_nonlinearity and kiln_fan_mode (torch.nn.init)
NONLINEARITY = {"linear": 0, "sigmoid": 1, "tanh": 2, "relu": 3,
                "leaky_relu": 4, "selu": 5}
FAN_IN, FAN_OUT = 0, 1
ERR_ARG, ERR_SHAPE, ERR_DTYPE, ERR_OOM, ERR_DEVICE = -1, -2, -3, -4, -5
ERR_COMPILE, ERR_IO, ERR_UNSUPPORTED, ERR_INDEX = -6, -7, -8, -9
STATUS_NAMES = {0: "KILN_OK", -1: "KILN_ERR_ARG", -2: "KILN_ERR_SHAPE",
                -3: "KILN_ERR_DTYPE", -4: "KILN_ERR_OOM",
                -5: "KILN_ERR_DEVICE", -6: "KILN_ERR_COMPILE",
                -7: "KILN_ERR_IO", -8: "KILN_ERR_UNSUPPORTED",
                -9: "KILN_ERR_INDEX"}
MAX_DIMS = 16


def is_float(d):
    return d in (F16, BF16, F32, F64)


def is_int(d):
    return d in (U8, I8, I16, I32, I64)


def bf16_bits_to_f32(bits):
    """uint16 BF16 bit patterns -> float32 values (exact)."""
    bits = np.asarray(bits, dtype=np.uint16)
    wide = bits.reshape(-1).astype(np.uint32) << np.uint32(16)
    return wide.view(np.float32).reshape(bits.shape)


def f32_to_bf16_bits(x):
    """float32 values -> uint16 BF16 bits, rounding to nearest even; NaN
    stays NaN (quiet, sign kept)."""
    x = np.asarray(x, dtype=np.float32)
    shape = x.shape
    x = np.ascontiguousarray(x).reshape(-1)
    u = x.view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(x)
    if nan.any():
        rounded = np.where(nan, ((u >> 16) | 0x0040).astype(np.uint16),
                           rounded)
    return rounded.astype(np.uint16).reshape(shape)


# ---------------------------------------------------------- signatures

# name (without "kiln_") -> (return code, argument codes). Codes:
#   T tensor*   S storage*   i int (also enums)   l int64_t   u uint64_t
#   d double    b bool       n size_t   z const char*   m malloc'ed char*
#   p void*/FILE*/function pointer/other out-pointers   L int64_t*   I int*
#   A kiln_tensor**   Z const char *const* (array of strings)   v void
# tests/python/test_api.py checks this table against kiln.h.
SIGNATURES = {
    "retain": ("T", "T"),
    "release": ("v", "T"),
    "scope_begin": ("v", ""),
    "scope_end": ("v", ""),
    "keep": ("T", "T"),
    "escape": ("T", "T"),
    "last_error": ("z", ""),
    "last_status": ("i", ""),
    "clear_error": ("v", ""),
    "status_name": ("z", "i"),
    "dtype_name": ("z", "i"),
    "dtype_size": ("n", "i"),
    "set_default_dtype": ("i", "i"),
    "default_dtype": ("i", ""),
    "cpu_target": ("i", "mnpp"),
    "engine_stats_get": ("i", "p"),
    "engine_stats_reset_peak": ("v", ""),
    "empty": ("T", "iiL"),
    "zeros": ("T", "iiL"),
    "ones": ("T", "iiL"),
    "full": ("T", "iiLd"),
    "scalar": ("T", "id"),
    "arange": ("T", "iddd"),
    "linspace": ("T", "iddl"),
    "manual_seed": ("v", "u"),
    "rand": ("T", "iiL"),
    "randn": ("T", "iiL"),
    "randint": ("T", "illiL"),
    "rand_like": ("T", "T"),
    "randn_like": ("T", "T"),
    "uniform_": ("i", "Tdd"),
    "normal_": ("i", "Tdd"),
    "randperm": ("T", "l"),
    "full_like": ("T", "Td"),
    "zeros_like": ("T", "T"),
    "ones_like": ("T", "T"),
    "eye": ("T", "ill"),
    "from_data": ("T", "iiLp"),
    "from_blob": ("T", "iiLLppp"),
    "storage_new": ("S", "il"),
    "storage_of": ("S", "T"),
    "storage_retain": ("S", "S"),
    "storage_release": ("v", "S"),
    "storage_numel": ("l", "S"),
    "storage_dtype": ("i", "S"),
    "tensor_from_storage": ("T", "SliLL"),
    "set_": ("i", "TT"),
    "resize_": ("i", "TiL"),
    "dim": ("i", "T"),
    "size": ("l", "Ti"),
    "sizes": ("L", "T"),
    "stride": ("l", "Ti"),
    "strides": ("L", "T"),
    "storage_offset": ("l", "T"),
    "numel": ("l", "T"),
    "dtype_of": ("i", "T"),
    "device_of": ("i", "T"),
    "is_contiguous": ("b", "T"),
    "is_same_size": ("b", "TT"),
    "is_set_to": ("b", "TT"),
    "narrow": ("T", "Till"),
    "select": ("T", "Til"),
    "slice": ("T", "Tilll"),
    "transpose": ("T", "Tii"),
    "t": ("T", "T"),
    "permute": ("T", "TiI"),
    "unfold": ("T", "Till"),
    "expand": ("T", "TiL"),
    "expand_as": ("T", "TT"),
    "view": ("T", "TiL"),
    "view_as": ("T", "TT"),
    "reshape": ("T", "TiL"),
    "squeeze": ("T", "T"),
    "squeeze_dim": ("T", "Ti"),
    "unsqueeze": ("T", "Ti"),
    "flatten": ("T", "Tii"),
    "as_strided": ("T", "TiLLl"),
    "split": ("i", "TliAi"),
    "chunk": ("i", "TiiAi"),
    "clone": ("T", "T"),
    "contiguous": ("T", "T"),
    "to_dtype": ("T", "Ti"),
    "to_device": ("T", "Ti"),
    "copy_": ("i", "TT"),
    "fill_": ("i", "Td"),
    "zero_": ("i", "T"),
    "neg": ("T", "T"),
    "abs": ("T", "T"),
    "sign": ("T", "T"),
    "exp": ("T", "T"),
    "exp2": ("T", "T"),
    "log": ("T", "T"),
    "log2": ("T", "T"),
    "log1p": ("T", "T"),
    "expm1": ("T", "T"),
    "sqrt": ("T", "T"),
    "rsqrt": ("T", "T"),
    "reciprocal": ("T", "T"),
    "sin": ("T", "T"),
    "cos": ("T", "T"),
    "tan": ("T", "T"),
    "tanh": ("T", "T"),
    "sigmoid": ("T", "T"),
    "relu": ("T", "T"),
    "gelu": ("T", "T"),
    "silu": ("T", "T"),
    "erf": ("T", "T"),
    "floor": ("T", "T"),
    "ceil": ("T", "T"),
    "round": ("T", "T"),
    "trunc": ("T", "T"),
    "logical_not": ("T", "T"),
    "asin": ("T", "T"),
    "acos": ("T", "T"),
    "atan": ("T", "T"),
    "sinh": ("T", "T"),
    "cosh": ("T", "T"),
    "asinh": ("T", "T"),
    "acosh": ("T", "T"),
    "atanh": ("T", "T"),
    "lerp": ("T", "TTT"),
    "lerp_scalar": ("T", "TTd"),
    "isnan": ("T", "T"),
    "isinf": ("T", "T"),
    "isfinite": ("T", "T"),
    "isclose": ("T", "TTddb"),
    "allclose": ("i", "TTddbp"),
    "equal": ("i", "TTp"),
    "outer": ("T", "TT"),
    "einsum": ("T", "zAi"),
    "flip": ("T", "TiI"),
    "roll": ("T", "TiLiI"),
    "one_hot": ("T", "Tl"),
    "add": ("T", "TT"),
    "sub": ("T", "TT"),
    "mul": ("T", "TT"),
    "div": ("T", "TT"),
    "pow": ("T", "TT"),
    "maximum": ("T", "TT"),
    "minimum": ("T", "TT"),
    "fmod": ("T", "TT"),
    "remainder": ("T", "TT"),
    "atan2": ("T", "TT"),
    "eq": ("T", "TT"),
    "ne": ("T", "TT"),
    "lt": ("T", "TT"),
    "le": ("T", "TT"),
    "gt": ("T", "TT"),
    "ge": ("T", "TT"),
    "logical_and": ("T", "TT"),
    "logical_or": ("T", "TT"),
    "logical_xor": ("T", "TT"),
    "add_scalar": ("T", "Td"),
    "sub_scalar": ("T", "Td"),
    "mul_scalar": ("T", "Td"),
    "div_scalar": ("T", "Td"),
    "pow_scalar": ("T", "Td"),
    "maximum_scalar": ("T", "Td"),
    "minimum_scalar": ("T", "Td"),
    "eq_scalar": ("T", "Td"),
    "ne_scalar": ("T", "Td"),
    "lt_scalar": ("T", "Td"),
    "le_scalar": ("T", "Td"),
    "gt_scalar": ("T", "Td"),
    "ge_scalar": ("T", "Td"),
    "where": ("T", "TTT"),
    "tril": ("T", "Tl"),
    "triu": ("T", "Tl"),
    "clamp": ("T", "Tdd"),
    "add_": ("i", "TT"),
    "sub_": ("i", "TT"),
    "mul_": ("i", "TT"),
    "div_": ("i", "TT"),
    "pow_": ("i", "TT"),
    "fmod_": ("i", "TT"),
    "remainder_": ("i", "TT"),
    "atan2_": ("i", "TT"),
    "add_scalar_": ("i", "Td"),
    "sub_scalar_": ("i", "Td"),
    "mul_scalar_": ("i", "Td"),
    "div_scalar_": ("i", "Td"),
    "pow_scalar_": ("i", "Td"),
    "addcmul_": ("i", "TTTd"),
    "addcdiv_": ("i", "TTTd"),
    "clamp_": ("i", "Tdd"),
    "neg_": ("i", "T"),
    "abs_": ("i", "T"),
    "sign_": ("i", "T"),
    "exp_": ("i", "T"),
    "exp2_": ("i", "T"),
    "log_": ("i", "T"),
    "log2_": ("i", "T"),
    "log1p_": ("i", "T"),
    "expm1_": ("i", "T"),
    "sqrt_": ("i", "T"),
    "rsqrt_": ("i", "T"),
    "reciprocal_": ("i", "T"),
    "sin_": ("i", "T"),
    "cos_": ("i", "T"),
    "tan_": ("i", "T"),
    "tanh_": ("i", "T"),
    "sigmoid_": ("i", "T"),
    "relu_": ("i", "T"),
    "erf_": ("i", "T"),
    "floor_": ("i", "T"),
    "ceil_": ("i", "T"),
    "round_": ("i", "T"),
    "trunc_": ("i", "T"),
    "asin_": ("i", "T"),
    "acos_": ("i", "T"),
    "atan_": ("i", "T"),
    "sinh_": ("i", "T"),
    "cosh_": ("i", "T"),
    "asinh_": ("i", "T"),
    "acosh_": ("i", "T"),
    "atanh_": ("i", "T"),
    "sum": ("T", "TiIb"),
    "mean": ("T", "TiIb"),
    "prod": ("T", "TiIb"),
    "amax": ("T", "TiIb"),
    "amin": ("T", "TiIb"),
    "all": ("T", "TiIb"),
    "any": ("T", "TiIb"),
    "argmax": ("T", "Tib"),
    "matmul": ("T", "TT"),
    "mm": ("T", "TT"),
    "bmm": ("T", "TT"),
    "mv": ("T", "TT"),
    "dot": ("T", "TT"),
    "addmm": ("T", "TTTdd"),
    "argmin": ("T", "Tib"),
    "logsumexp": ("T", "TiIb"),
    "var": ("T", "TiIib"),
    "std": ("T", "TiIib"),
    "norm": ("T", "TdiIb"),
    "cumsum": ("T", "Ti"),
    "cumprod": ("T", "Ti"),
    "softmax": ("T", "Ti"),
    "log_softmax": ("T", "Ti"),
    "layer_norm": ("T", "TiTTd"),
    "conv": ("T", "TTTiLLLl"),
    "conv_transpose": ("T", "TTTiLLLlL"),
    "leaky_relu": ("T", "Td"),
    "elu": ("T", "Td"),
    "selu": ("T", "T"),
    "softplus": ("T", "Tdd"),
    "softsign": ("T", "T"),
    "prelu": ("T", "TT"),
    "glu": ("T", "Ti"),
    "pixel_shuffle": ("T", "Tl"),
    "embedding": ("T", "TT"),
    "linear": ("T", "TTT"),
    "cross_entropy": ("T", "TTid"),
    "nll_loss": ("T", "TTi"),
    "mse_loss": ("T", "TTi"),
    "binary_cross_entropy": ("T", "TTTi"),
    "binary_cross_entropy_with_logits": ("T", "TTTTi"),
    "l1_loss": ("T", "TTi"),
    "smooth_l1_loss": ("T", "TTid"),
    "huber_loss": ("T", "TTid"),
    "kl_div": ("T", "TTib"),
    "dropout": ("T", "Tdb"),
    "gelu_tanh": ("T", "T"),
    "rms_norm": ("T", "TiTd"),
    "scaled_dot_product_attention": ("T", "TTTTdbd"),
    "pad": ("T", "TiLid"),
    "max_pool": ("T", "TiLLLLb"),
    "avg_pool": ("T", "TiLLLbb"),
    "batch_norm": ("T", "TTTTTbdd"),
    "group_norm": ("T", "TlTTd"),
    "adaptive_avg_pool": ("T", "TiL"),
    "adaptive_max_pool": ("T", "TiL"),
    "interpolate": ("T", "TiLpib"),
    "calculate_gain": ("d", "id"),
    "linalg_solve": ("T", "TT"),
    "linalg_inv": ("T", "T"),
    "kaiming_uniform_": ("i", "Tdii"),
    "kaiming_normal_": ("i", "Tdii"),
    "xavier_uniform_": ("i", "Td"),
    "xavier_normal_": ("i", "Td"),
    "instance_norm": ("T", "TTTd"),
    "realize": ("i", "T"),
    "realize_many": ("i", "Ai"),
    "read": ("i", "Tpn"),
    "item": ("d", "T"),
    "get": ("d", "TL"),
    "item_f64": ("i", "Tp"),
    "get_f64": ("i", "TLp"),
    "set": ("i", "TLd"),
    "data": ("p", "T"),
    "print": ("i", "Tp"),
    "to_string": ("m", "T"),
    "set_backend": ("i", "z"),
    "set_num_threads": ("i", "i"),
    "profile_begin": ("v", ""),
    "profile_end": ("v", ""),
    "profile_count": ("i", ""),
    "profile_get": ("i", "ip"),
    "profile_print": ("i", "p"),
    "profile_write_trace": ("i", "z"),
    "graph_write_dot": ("i", "Aizi"),
    "save_npy": ("i", "Tz"),
    "load_npy": ("T", "z"),
    "save_safetensors": ("i", "ziZA"),
    "load_safetensors": ("i", "zppp"),
    "safetensors_free": ("v", "ipA"),
    "load_safetensor": ("T", "zz"),
    "apply_": ("i", "Tpp"),
    "map_": ("i", "TTpp"),
    "map2_": ("i", "TTTpp"),
    "index_select": ("T", "TiT"),
    "index_copy_": ("i", "TiTT"),
    "index_add_": ("i", "TiTT"),
    "index_fill_": ("i", "TiTd"),
    "gather": ("T", "TiT"),
    "scatter_": ("i", "TiTT"),
    "scatter_value_": ("i", "TiTd"),
    "scatter_add_": ("i", "TiTT"),
    "index_put_": ("i", "TiATb"),
    "bincount": ("T", "TTl"),
    "histc": ("T", "Tldd"),
    "masked_select": ("T", "TT"),
    "masked_copy_": ("i", "TTT"),
    "masked_fill_": ("i", "TTd"),
    "nonzero": ("T", "T"),
    "repeat": ("T", "TiL"),
    "cat": ("T", "Aii"),
    "stack": ("T", "Aii"),
    "clip_grad_norm_": ("i", "AiddA"),
    "sgd": ("p", "Aidddb"),
    "adam": ("p", "Aidddddb"),
    "rmsprop": ("p", "Aidddddb"),
    "adagrad": ("p", "Aiddddd"),
    "lr_step": ("d", "dlld"),
    "lr_cosine": ("d", "dlld"),
    "lr_linear": ("d", "dlddl"),
    "optimizer_step": ("i", "pA"),
    "optimizer_set_lr": ("i", "pd"),
    "optimizer_lr": ("d", "p"),
    "optimizer_save": ("i", "pz"),
    "optimizer_load": ("i", "pz"),
    "optimizer_free": ("v", "p"),
    "grad": ("i", "AAiAiA"),
    "detach": ("T", "T"),
    "sort": ("i", "TibbAA"),
    "argsort": ("T", "Tibb"),
    "topk": ("i", "TlibbAA"),
    "max": ("i", "TibAA"),
    "min": ("i", "TibAA"),
    "median": ("i", "TibAA"),
    "kthvalue": ("i", "TlibAA"),
    "mode": ("i", "TibAA"),
    "unique": ("i", "TbbbAAA"),
}

# Functions whose int result is a count or a value, not a kiln_status: a
# negative result is only an error together with kiln_last_status().
_INT_NOT_STATUS = {"last_status", "default_dtype", "dim", "dtype_of",
                   "device_of", "storage_dtype", "profile_count"}

_CT = {"T": c_void_p, "S": c_void_p, "i": c_int, "l": c_int64,
       "u": c_uint64, "d": c_double, "b": c_bool, "n": c_size_t,
       "z": c_char_p, "m": c_void_p, "p": c_void_p, "L": POINTER(c_int64),
       "I": POINTER(c_int), "A": POINTER(c_void_p),
       "Z": POINTER(c_char_p), "v": None}


def _find_library():
    path = os.environ.get("KILN_LIB")
    if path:
        return path
    here = os.path.dirname(os.path.abspath(__file__))
    for cand in ("build/libkiln.so", "build-asan/libkiln.so"):
        p = os.path.join(here, "..", "..", cand)
        if os.path.exists(p):
            return os.path.normpath(p)
    raise RuntimeError("kiln_ctypes: set KILN_LIB to the path of libkiln.so")


LIB_PATH = _find_library()
# The tests count compiles and cache hits: no on-disk kernel cache
# (docs/cache.md), however pytest is started (CTest sets it empty too).
os.environ["KILN_CACHE_DIR"] = ""
lib = ctypes.CDLL(LIB_PATH)
MISSING = []          # functions of kiln.h the library does not export
for _name, (_ret, _args) in SIGNATURES.items():
    try:
        _f = getattr(lib, "kiln_" + _name)
    except AttributeError:
        MISSING.append("kiln_" + _name)
        continue
    _f.restype = _CT[_ret]
    _f.argtypes = [_CT[c] for c in _args]

_libc = ctypes.CDLL(None)
_libc.free.argtypes = [c_void_p]
_libc.free.restype = None
_libc.tmpfile.restype = c_void_p
_libc.fclose.argtypes = [c_void_p]
_libc.fflush.argtypes = [c_void_p]
_libc.rewind.argtypes = [c_void_p]
_libc.rewind.restype = None
_libc.fread.argtypes = [c_void_p, c_size_t, c_size_t, c_void_p]
_libc.fread.restype = c_size_t


# ---------------------------------------------------------------- errors

class KilnError(Exception):
    """A Kiln call failed: `status` (negative kiln_status), `message`
    (kiln_last_error(), e.g. "kiln_add: sizes [3] and [4] cannot be
    broadcast") and `function` (the Python-level call)."""

    def __init__(self, status, message, function):
        super().__init__(f"{function}: {STATUS_NAMES.get(status, status)}: "
                         f"{message}")
        self.status = status
        self.message = message
        self.function = function


def _raise_if_error(name, ret_code, result):
    status = lib.kiln_last_status()
    if status != OK:
        msg = lib.kiln_last_error().decode()
        lib.kiln_clear_error()
        raise KilnError(status, msg, "kiln_" + name)
    if ret_code in "TS" and not result:
        raise KilnError(0, "returned NULL without setting an error",
                        "kiln_" + name)
    if (ret_code == "i" and name not in _INT_NOT_STATUS
            and name not in ("split", "chunk") and result < 0):
        raise KilnError(result, "returned a negative status without "
                        "setting an error", "kiln_" + name)


# --------------------------------------------------------------- handles

class Storage:
    """Owns one kiln_storage reference."""
    __slots__ = ("_h", "__weakref__")

    def __init__(self, handle):
        self._h = handle

    def __del__(self):
        if self._h and lib is not None:
            lib.kiln_storage_release(self._h)
            self._h = None

    @property
    def handle(self):
        return self._h

    @property
    def numel(self):
        return storage_numel(self)

    @property
    def dtype(self):
        return storage_dtype(self)

    def __eq__(self, other):
        return isinstance(other, Storage) and self._h == other._h

    def __hash__(self):
        return hash(self._h)


class Tensor:
    """Owns one kiln_tensor reference (released when garbage-collected).
    Every module-level function is also a method: t.narrow(0, 1, 2)."""
    __slots__ = ("_h", "__weakref__")

    def __init__(self, handle):
        self._h = handle

    def __del__(self):
        if self._h and lib is not None:
            lib.kiln_release(self._h)
            self._h = None

    @property
    def handle(self):
        return self._h

    @property
    def ndim(self):
        return dim(self)

    @property
    def shape(self):
        n = dim(self)
        p = lib.kiln_sizes(self._h)
        return tuple(p[i] for i in range(n))

    @property
    def stride_tuple(self):
        n = dim(self)
        p = lib.kiln_strides(self._h)
        return tuple(p[i] for i in range(n))

    @property
    def offset(self):
        return storage_offset(self)

    @property
    def dtype(self):
        return dtype_of(self)

    def __len__(self):
        return self.shape[0]

    def to_numpy(self):
        """Forces the tensor and returns its values (row-major copy) as a
        NumPy array; BF16 as uint16 bits."""
        out = np.empty(self.shape, dtype=NP_DTYPE[self.dtype])
        read(self, out)
        return out

    def storage(self):
        return storage_of(self)

    def __repr__(self):
        try:
            return (f"<kiln.Tensor {DTYPE_NAMES.get(self.dtype)} "
                    f"sizes={self.shape} strides={self.stride_tuple} "
                    f"offset={self.offset}>")
        except KilnError:
            return "<kiln.Tensor ?>"

    def __getattr__(self, name):
        f = globals().get(name)
        if name in SIGNATURES and callable(f):
            return lambda *a, **k: f(self, *a, **k)
        raise AttributeError(name)


# ------------------------------------------------- generic call wrapper

def _arr(ctype, seq):
    seq = [int(x) for x in seq]
    return (ctype * builtins.max(len(seq), 1))(*seq), len(seq)


def _convert(code, value, keep):
    if code == "T":
        if value is None:
            return None
        if not isinstance(value, Tensor):
            raise TypeError(f"expected a kiln Tensor, got {type(value)}")
        return value._h
    if code == "S":
        return None if value is None else value._h
    if code in "LI":
        if value is None:
            return None
        a, _ = _arr(c_int64 if code == "L" else c_int, value)
        keep.append(a)
        return a
    if code == "A":
        a = (c_void_p * builtins.max(len(value), 1))(
            *[None if v is None else v._h for v in value])
        keep.append(a)
        return a
    if code == "z":
        return None if value is None else value.encode()
    if code == "Z":
        if value is None:
            return None
        a = (c_char_p * builtins.max(len(value), 1))(
            *[None if v is None else
              (v if isinstance(v, bytes) else v.encode()) for v in value])
        keep.append(a)
        return a
    if code == "p":
        if isinstance(value, np.ndarray):
            return value.ctypes.data
        return value
    return value


def _make(name, ret, args):
    cfunc = getattr(lib, "kiln_" + name, None)
    # An `i` right before an array argument (L, I, Z) is that array's
    # length, and an `i` right after an A is the A's length: both are filled
    # in from the Python sequence.
    counts = {k for k in range(len(args) - 1)
              if args[k] == "i" and args[k + 1] in "LIZ"}
    counts |= {k + 1 for k in range(len(args) - 1)
               if args[k] == "A" and args[k + 1] == "i"}
    n_expected = len(args) - len(counts)

    def call(*pyargs):
        if cfunc is None:
            raise KilnError(ERR_UNSUPPORTED, "not exported by " + LIB_PATH,
                            "kiln_" + name)
        if len(pyargs) != n_expected:
            raise TypeError(f"{name}() takes {n_expected} arguments "
                            f"({len(pyargs)} given)")
        keep, cargs = [], []
        it = iter(pyargs)
        for k, code in enumerate(args):
            if k in counts:
                if code == "i" and k + 1 < len(args) and args[k + 1] in "LIZ":
                    cargs.append(None)          # set when the array comes
                else:                           # after an A
                    cargs.append(len(last_seq))
                continue
            v = next(it)
            if code in "LIAZ":
                last_seq = [] if v is None else list(v)
                if k - 1 in counts and args[k - 1] == "i":
                    cargs[k - 1] = len(last_seq)
            cargs.append(_convert(code, v, keep))
        result = cfunc(*cargs)
        if ret == "m":
            text = None
            if result:
                text = ctypes.string_at(result).decode()
                _libc.free(result)
            _raise_if_error(name, "T", text)
            return text
        # wrap first: a handle returned together with an error is released
        obj = Tensor(result) if ret == "T" and result else \
            Storage(result) if ret == "S" and result else result
        _raise_if_error(name, ret, result)
        if ret in "TS":
            return obj
        if ret == "z":
            return result.decode() if result is not None else None
        return result

    call.__name__ = name
    call.__doc__ = f"kiln_{name}: returns {ret}, args {args!r}"
    return call


for _name, (_ret, _args) in SIGNATURES.items():
    globals()[_name] = _make(_name, _ret, _args)

# The error functions themselves never raise.
def last_error():
    return lib.kiln_last_error().decode()


def last_status():
    return lib.kiln_last_status()


def clear_error():
    lib.kiln_clear_error()


_raw_read = globals()["read"]
_raw_split = globals()["split"]
_raw_chunk = globals()["chunk"]
_raw_print = globals()["print"]
_raw_sizes = globals()["sizes"]
_raw_strides = globals()["strides"]


# --------------------------------------------------------- conveniences

class KernelRecord(ctypes.Structure):
    """The known prefix of struct kiln_kernel_record (fields may be added
    after these, so profile_records() passes a larger buffer)."""
    _fields_ = [("name", c_char_p), ("backend", c_char_p), ("n_ops", c_int),
                ("numel", c_int64), ("bytes_read", c_int64),
                ("bytes_written", c_int64), ("flops", c_int64),
                ("compile_ns", c_int64), ("run_ns", c_int64),
                ("cache_hit", c_bool), ("threads", c_int),
                ("load_ns", c_int64)]


def profile_records():
    """Every record since kiln_profile_begin, as dicts."""
    out = []
    for i in range(profile_count()):
        buf = ctypes.create_string_buffer(4096)   # room for added fields
        profile_get(i, ctypes.addressof(buf))
        r = KernelRecord.from_buffer_copy(buf.raw[:ctypes.sizeof(
            KernelRecord)])
        d = {f: getattr(r, f) for f, _ in KernelRecord._fields_}
        d["name"] = d["name"].decode() if d["name"] else None
        d["backend"] = d["backend"].decode() if d["backend"] else None
        out.append(d)
    return out


def read(t, out):
    """kiln_read into a NumPy array `out` (its bytes are the limit)."""
    return _raw_read(t, out.ctypes.data if out.nbytes else
                     np.empty(1, np.uint8).ctypes.data, out.nbytes)


def sizes(t):
    return t.shape


def strides(t):
    return t.stride_tuple


def split(t, size, d):
    n = _raw_split(t, size, d, [])
    out = (c_void_p * builtins.max(n, 1))()
    n2 = lib.kiln_split(t._h, size, d, out, n)
    _raise_if_error("split", "i", n2)
    return [Tensor(out[i]) for i in range(builtins.min(n, n2))]


def chunk(t, n, d):
    count = _raw_chunk(t, n, d, [])
    out = (c_void_p * builtins.max(count, 1))()
    n2 = lib.kiln_chunk(t._h, n, d, out, count)
    _raise_if_error("chunk", "i", n2)
    return [Tensor(out[i]) for i in range(builtins.min(count, n2))]


def print_to_string(t):
    """What kiln_print writes to a FILE, via tmpfile()."""
    f = _libc.tmpfile()
    try:
        _raw_print(t, f)
        _libc.fflush(f)
        _libc.rewind(f)
        chunks = []
        buf = ctypes.create_string_buffer(4096)
        while True:
            got = _libc.fread(buf, 1, 4096, f)
            if not got:
                break
            chunks.append(buf.raw[:got])
        return b"".join(chunks).decode()
    finally:
        _libc.fclose(f)


def from_numpy(a, dtype=None):
    """A new contiguous Kiln tensor with a copy of `a` (kiln_from_data).
    For dtype=BF16, `a` is either uint16 bits or floats (rounded to
    nearest even)."""
    a = np.asarray(a)
    if dtype is None:
        dtype = FROM_NP[a.dtype]
    if dtype == BF16:
        if a.dtype != np.uint16:
            a = f32_to_bf16_bits(a.astype(np.float32))
    else:
        a = a.astype(NP_DTYPE[dtype], copy=False)
    a = np.array(a, order="C", copy=True)   # (ascontiguousarray makes 0-d 1-d)
    return from_data(dtype, list(a.shape), a if a.size else None)


def tensor(values, dtype):
    """from_numpy of a nested list / scalar with an explicit dtype."""
    return from_numpy(np.asarray(values), dtype)


# ------------------------------------------------- files and callbacks

def load_safetensors(path):
    """kiln_load_safetensors: {name: Tensor} in the header's order. Each
    Tensor holds its own reference; the C arrays are freed with
    kiln_safetensors_free before returning."""
    n = c_int(-1)
    names = POINTER(c_char_p)()
    handles = POINTER(c_void_p)()
    st = lib.kiln_load_safetensors(path.encode(), ctypes.byref(n),
                                   ctypes.byref(names), ctypes.byref(handles))
    _raise_if_error("load_safetensors", "i", st)
    out = {}
    for i in range(n.value):
        out[names[i].decode()] = Tensor(lib.kiln_retain(handles[i]))
    lib.kiln_safetensors_free(n.value, names, handles)
    return out


# ------------------------------------------------------ differentiation

_raw_grad = globals()["grad"]


def grad(outputs, wrt, cotangents=None):
    """kiln_grad: a list of new gradient Tensors, one per wrt (wrt[j]'s
    sizes and dtype). outputs and wrt are Tensors or sequences of them;
    cotangents None (every output a single element, seeded with 1) or a
    sequence of one Tensor per output."""
    outputs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
    wrt = [wrt] if isinstance(wrt, Tensor) else list(wrt)
    outs = (c_void_p * len(outputs))(*[t._h for t in outputs])
    cots = None
    if cotangents is not None:
        cotangents = list(cotangents)
        cots = (c_void_p * builtins.max(len(cotangents), 1))(
            *[None if c is None else c._h for c in cotangents])
    ws = (c_void_p * len(wrt))(*[t._h for t in wrt])
    gs = (c_void_p * len(wrt))()
    st = lib.kiln_grad(outs, cots, len(outputs), ws, len(wrt), gs)
    # wrap first: every returned handle is owned even if an error follows
    out = [Tensor(gs[j]) if gs[j] else None for j in range(len(wrt))]
    _raise_if_error("grad", "i", st)
    return out


def _with_outputs(name, n_out):
    """The Python form of a C function ending in n_out kiln_tensor **
    outputs: it takes the other arguments and returns the outputs (a
    tuple of Tensors; None for an output left NULL)."""
    cfunc = getattr(lib, "kiln_" + name, None)
    ret, args = SIGNATURES[name]
    n_in = len(args) - n_out

    def call(*pyargs):
        if len(pyargs) != n_in:
            raise TypeError(f"{name}() takes {n_in} arguments "
                            f"({len(pyargs)} given)")
        keep = []
        cargs = [_convert(c, v, keep) for c, v in zip(args, pyargs)]
        outs = [(c_void_p * 1)() for _ in range(n_out)]
        st = cfunc(*cargs, *outs)
        # wrap first: every returned handle is owned even if an error follows
        res = tuple(Tensor(o[0]) if o[0] else None for o in outs)
        _raise_if_error(name, "i", st)
        return res

    call.__name__ = name
    return call


def _sorting_with_none(name, n_out):
    """As _with_outputs; `name_raw(..., out0, out1, ...)` passes the output
    pointers given (None for NULL) and returns (status, handles)."""
    cfunc = getattr(lib, "kiln_" + name, None)

    def call(*pyargs_and_outs):
        pyargs, present = pyargs_and_outs[:-n_out], pyargs_and_outs[-n_out:]
        ret, args = SIGNATURES[name]
        keep = []
        cargs = [_convert(c, v, keep) for c, v in zip(args, pyargs)]
        outs = [(c_void_p * 1)(1) if p else None for p in present]
        st = cfunc(*cargs, *outs)
        if st != 0:  # outputs untouched on error (kiln.h): the sentinel 1 stays
            return st, [None if o is None else o[0] for o in outs]
        return st, [Tensor(o[0]) if o is not None and o[0] else None for o in outs]

    return call


sort = _with_outputs("sort", 2)
topk = _with_outputs("topk", 2)
max = _with_outputs("max", 2)  # noqa: A001 (kiln_max; the module uses builtins.max)
min = _with_outputs("min", 2)  # noqa: A001 (kiln_min; builtins.min)
median = _with_outputs("median", 2)
kthvalue = _with_outputs("kthvalue", 2)
mode = _with_outputs("mode", 2)
unique = _with_outputs("unique", 3)
unique_raw = _sorting_with_none("unique", 3)
sort_raw = _sorting_with_none("sort", 2)


# C types of kiln_fn1/2/3. The wrappers below accept either such an object
# or a Python callable taking the element values (without ctx).
FN1 = ctypes.CFUNCTYPE(c_double, c_double, c_void_p)
FN2 = ctypes.CFUNCTYPE(c_double, c_double, c_double, c_void_p)
FN3 = ctypes.CFUNCTYPE(c_double, c_double, c_double, c_double, c_void_p)
_raw_apply = globals()["apply_"]
_raw_map = globals()["map_"]
_raw_map2 = globals()["map2_"]


def _callback(kind, f):
    if f is None or isinstance(f, kind):
        return f
    return kind(lambda *a: f(*a[:-1]))


def apply_(t, f, ctx=None):
    """kiln_apply_(t, f, ctx); f a Python callable f(x) or an FN1."""
    return _raw_apply(t, _callback(FN1, f), ctx)


def map_(t, src, f, ctx=None):
    """kiln_map_(t, src, f, ctx); f a Python callable f(x, y) or an FN2."""
    return _raw_map(t, src, _callback(FN2, f), ctx)


def map2_(t, a, b, f, ctx=None):
    """kiln_map2_(t, a, b, f, ctx); f(x, y, z) or an FN3."""
    return _raw_map2(t, a, b, _callback(FN3, f), ctx)


# ------------------------------------------------------------ optimizers

_raw_sgd = globals()["sgd"]
_raw_adam = globals()["adam"]
_raw_rmsprop = globals()["rmsprop"]
_raw_adagrad = globals()["adagrad"]


def clip_grad_norm_(grads, max_norm, norm_type=2.0):
    """kiln_clip_grad_norm_: scales the grads in place (lazily) and
    returns the total norm before clipping as a 0-d Tensor."""
    grads = list(grads)
    arr = (c_void_p * builtins.max(len(grads), 1))(
        *[None if g is None else g._h for g in grads])
    out = c_void_p()
    st = lib.kiln_clip_grad_norm_(arr, len(grads), max_norm, norm_type,
                                  ctypes.byref(out))
    total = Tensor(out.value) if out.value else None
    _raise_if_error("clip_grad_norm_", "i", st)
    return total


class Optimizer:
    """Owns a kiln_optimizer (freed in __del__ or by free()); `lr` reads
    and sets the learning rate."""

    def __init__(self, handle):
        self._h = handle

    def __del__(self):
        self.free()

    def free(self):
        if self._h and lib is not None:
            lib.kiln_optimizer_free(self._h)
        self._h = None

    def step(self, grads):
        return optimizer_step(self._h, list(grads))

    @property
    def lr(self):
        return optimizer_lr(self._h)

    @lr.setter
    def lr(self, value):
        optimizer_set_lr(self._h, value)

    def save(self, path):
        return optimizer_save(self._h, path)

    def load(self, path):
        return optimizer_load(self._h, path)


def sgd(params, lr, momentum=0.0, weight_decay=0.0, nesterov=False):
    """kiln_sgd as an Optimizer (torch.optim.SGD's argument names)."""
    return Optimizer(_raw_sgd(list(params), lr, momentum, weight_decay,
                              nesterov))


def adam(params, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
         decoupled_weight_decay=False):
    """kiln_adam as an Optimizer (torch.optim.Adam's argument names;
    decoupled_weight_decay=True is AdamW)."""
    return Optimizer(_raw_adam(list(params), lr, betas[0], betas[1], eps,
                               weight_decay, decoupled_weight_decay))


def rmsprop(params, lr, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0,
            centered=False):
    """kiln_rmsprop as an Optimizer (torch.optim.RMSprop's argument names)."""
    return Optimizer(_raw_rmsprop(list(params), lr, alpha, eps, weight_decay,
                                  momentum, centered))


def adagrad(params, lr, lr_decay=0.0, weight_decay=0.0,
            initial_accumulator_value=0.0, eps=1e-10):
    """kiln_adagrad as an Optimizer (torch.optim.Adagrad's argument names)."""
    return Optimizer(_raw_adagrad(list(params), lr, lr_decay, weight_decay,
                                  initial_accumulator_value, eps))


# ------------------------------------------------------------ resampling

def interpolate(x, size=None, scale_factor=None, mode=INTERP_NEAREST,
                align_corners=False):
    """kiln_interpolate with Torch's keywords: size or scale_factor (one
    value per spatial dim; nd is their count, or x's dims - 2 when both
    are None)."""
    given = size if size is not None else scale_factor
    nd = len(given) if given is not None else x.ndim - 2 if isinstance(x, Tensor) else 0
    sz = None if size is None else (c_int64 * builtins.max(nd, 1))(*size)
    sf = None if scale_factor is None else (c_double * builtins.max(nd, 1))(*scale_factor)
    r = lib.kiln_interpolate(None if x is None else x._h, nd, sz, sf, mode,
                             align_corners)
    obj = Tensor(r) if r else None
    _raise_if_error("interpolate", "T", r)
    return obj
