"""oracle.py — the NumPy side of the differential tests: Torch's dtype rules
(promotion, conversion), BF16 arithmetic through float32, random values per
dtype, and comparisons with the tolerances of docs/testing.md.

Values of a Kiln dtype are held in the NumPy dtype kiln_ctypes.NP_DTYPE
gives (BF16: uint16 bit patterns).
"""

import numpy as np

import kiln_ctypes as K

# ------------------------------------------------------------ promotion

_CAT = {K.BOOL: 0, K.U8: 1, K.I8: 1, K.I16: 1, K.I32: 1, K.I64: 1,
        K.F16: 2, K.BF16: 2, K.F32: 2, K.F64: 2}
_INT_BITS = {K.U8: 8, K.I8: 8, K.I16: 16, K.I32: 32, K.I64: 64}
_FLOAT_RANK = {K.F16: 1, K.BF16: 1, K.F32: 2, K.F64: 3}


def category(d):
    return _CAT[d]


def promote(a, b):
    """torch.promote_types."""
    if a == b:
        return a
    if _CAT[a] != _CAT[b]:
        return a if _CAT[a] > _CAT[b] else b
    if _CAT[a] == 2:
        if {a, b} == {K.F16, K.BF16}:
            return K.F32
        return a if _FLOAT_RANK[a] >= _FLOAT_RANK[b] else b
    ua, ub = a == K.U8, b == K.U8
    if ua == ub:
        return a if _INT_BITS[a] >= _INT_BITS[b] else b
    s = b if ua else a
    return s if _INT_BITS[s] > 8 else K.I16


def scalar_dtype(s, default_float=K.F32):
    """The dtype a double scalar stands for: an integral double is a Python
    int (I64), any other a Python float (the default float dtype)."""
    if np.isfinite(s) and float(s) == np.floor(s) and abs(s) < 9.2e18:
        return K.I64
    return default_float


def result_type(operands, default_float=K.F32):
    """torch.result_type. operands: list of ("dim", dtype), ("zero", dtype)
    or ("scalar", value)."""
    def fold(kind):
        out = None
        for k, v in operands:
            if k == kind:
                d = scalar_dtype(v, default_float) if kind == "scalar" else v
                out = d if out is None else promote(out, d)
        return out

    def combine(higher, lower):
        if higher is None:
            return lower
        if lower is None:
            return higher
        if _CAT[higher] == 2:
            return higher
        if higher == K.BOOL or _CAT[lower] == 2:
            return promote(higher, lower)
        return higher

    return combine(fold("dim"), combine(fold("zero"), fold("scalar")))


# ------------------------------------------------------------ conversion

def as_f32(x, d):
    """Values of dtype d as float32 (exact for F16/BF16/ints ≤ 24 bits)."""
    x = np.asarray(x)
    if d == K.BF16:
        return K.bf16_bits_to_f32(x)
    return x.astype(np.float32)


def as_f64(x, d):
    x = np.asarray(x)
    if d == K.BF16:
        return K.bf16_bits_to_f32(x).astype(np.float64)
    return x.astype(np.float64)


def from_f32(x, d):
    """float32 values -> dtype d (F16/BF16 round to nearest even)."""
    x = np.asarray(x, dtype=np.float32)
    if d == K.BF16:
        return K.f32_to_bf16_bits(x)
    return x.astype(K.NP_DTYPE[d])


def from_f64(x, d):
    """float64 results -> float dtype d: F32/F64 round once; F16 and BF16
    round through float32 (Kiln and Torch compute halves in float)."""
    x = np.asarray(x, dtype=np.float64)
    if d == K.F64:
        return x
    with np.errstate(over="ignore", invalid="ignore"):
        return from_f32(x.astype(np.float32), d)


def convert(x, src, dst):
    """Torch's conversion of values x (dtype src) to dtype dst.
    float -> int truncates toward zero (callers keep values representable);
    -> BOOL is x != 0; int -> narrower int wraps; -> F16/BF16 goes through
    float32 (as Torch's c10::Half / c10::BFloat16 constructors do)."""
    x = np.asarray(x)
    if src == dst:
        return x.copy()
    if dst == K.BOOL:
        if src == K.BF16:
            return K.bf16_bits_to_f32(x) != 0
        return x != 0
    if src == K.BF16:
        x = K.bf16_bits_to_f32(x)
        src = K.F32
    if K.is_int(dst):
        if K.is_float(src):
            x = np.trunc(x.astype(np.float64))
            if dst == K.I64 or dst == K.U8:
                x = x.astype(np.int64)
        with np.errstate(over="ignore", invalid="ignore"):
            return x.astype(K.NP_DTYPE[dst])
    # dst is a float type
    with np.errstate(over="ignore", invalid="ignore"):
        if dst in (K.F16, K.BF16):
            return from_f32(x.astype(np.float32), dst)
        return x.astype(K.NP_DTYPE[dst])


# ------------------------------------------------------------ random values

_INT_RANGE = {K.U8: (0, 255), K.I8: (-128, 127), K.I16: (-32768, 32767),
              K.I32: (-2**31, 2**31 - 1), K.I64: (-2**63, 2**63 - 1)}


def int_range(d):
    return _INT_RANGE[d]


def random_values(rng, d, shape, kind="any", lo=None, hi=None):
    """Random values of dtype d. kind: "any" (full range for ints; for floats
    a mix of small integers, halves, normals and a few ±0), "small" (ints in
    [-8, 8], floats in [-8, 8]), "positive", "unit" (floats in (-1, 1)),
    "special" (floats with inf/nan). lo/hi bound ints (inclusive)."""
    shape = tuple(shape)
    n = int(np.prod(shape, dtype=np.int64))
    if d == K.BOOL:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if K.is_int(d):
        a, b = _INT_RANGE[d]
        if kind == "small":
            a, b = max(a, -8), min(b, 8)
        if kind == "positive":
            a, b = max(a, 1), min(b, 100)
        if lo is not None:
            a = max(a, lo)
        if hi is not None:
            b = min(b, hi)
        v = rng.integers(a, b, size=shape, endpoint=True, dtype=np.int64) \
            if d != K.I64 else rng.integers(a, b, size=shape, endpoint=True,
                                             dtype=np.int64)
        if kind == "any" and n:
            # edges of the range show up often
            edges = np.array([a, b, 0, 1, -1 if a < 0 else 2], dtype=np.int64)
            mask = rng.random(shape) < 0.15
            v = np.where(mask, edges[rng.integers(0, 5, size=shape)], v)
        return v.astype(K.NP_DTYPE[d])
    # floats
    if kind == "small":
        v = rng.uniform(-8, 8, size=shape)
    elif kind == "positive":
        v = np.exp(rng.uniform(-6, 6, size=shape))
    elif kind == "unit":
        v = rng.uniform(-0.999, 0.999, size=shape)
    else:
        pick = rng.integers(0, 4, size=shape)
        v = np.select([pick == 0, pick == 1, pick == 2],
                      [rng.integers(-20, 21, size=shape).astype(np.float64),
                       rng.integers(-40, 41, size=shape) / 2.0,
                       rng.standard_normal(size=shape) * 3],
                      rng.standard_normal(size=shape) *
                      np.exp(rng.uniform(-10, 10, size=shape)))
        if n:
            z = rng.random(shape) < 0.05
            v = np.where(z, np.copysign(0.0, rng.standard_normal(shape)), v)
    if kind == "special" and n:
        sp = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0])
        mask = rng.random(shape) < 0.2
        v = np.where(mask, sp[rng.integers(0, 5, size=shape)], v)
    if lo is not None or hi is not None:
        v = np.clip(v, lo, hi)
    return from_f64(v, d)


# ------------------------------------------------------------ comparison

def _ordered(bits, width):
    """Sign-magnitude float bits -> integers whose difference counts ulps."""
    b = bits.astype(np.int64)
    sign = 1 << (width - 1)
    return np.where(b & sign, -(b & (sign - 1)), b)


def _nan_mask(x, d):
    if d == K.BF16:
        return np.isnan(K.bf16_bits_to_f32(x))
    return np.isnan(x)


def ulp_distance(got, want, d):
    """Distance in units in the last place of dtype d (NaNs excluded)."""
    if d == K.BF16:
        return np.abs(_ordered(got, 16) - _ordered(want, 16))
    got = np.ascontiguousarray(got).reshape(-1)
    want = np.ascontiguousarray(want).reshape(-1)
    if d == K.F16:
        return np.abs(_ordered(got.view(np.uint16), 16) -
                      _ordered(want.view(np.uint16), 16))
    if d == K.F32:
        return np.abs(_ordered(got.view(np.uint32), 32) -
                      _ordered(want.view(np.uint32), 32))
    g = got.view(np.uint64).astype(object)
    w = want.view(np.uint64).astype(object)
    s = 1 << 63
    og = np.array([-(x & (s - 1)) if x & s else x for x in g.ravel()],
                  dtype=object)
    ow = np.array([-(x & (s - 1)) if x & s else x for x in w.ravel()],
                  dtype=object)
    return np.abs(og - ow)


def assert_same(got, want, d, ulps=0, rtol=0.0, atol=0.0, what=""):
    """got (from Kiln) equals want (dtype d representation): exactly for
    BOOL and integers; for floats NaN where want is NaN and otherwise within
    `ulps` units in the last place, or |got - want| <= atol + rtol*|want|.
    -0.0 and +0.0 are equal."""
    got = np.asarray(got)
    want = np.asarray(want, dtype=K.NP_DTYPE[d])
    assert got.dtype == K.NP_DTYPE[d], (what, got.dtype, K.NP_DTYPE[d])
    assert got.shape == want.shape, (what, got.shape, want.shape)
    if not K.is_float(d):
        bad = got != want
    else:
        gn, wn = _nan_mask(got, d), _nan_mask(want, d)
        g64, w64 = as_f64(got, d), as_f64(want, d)
        with np.errstate(invalid="ignore", over="ignore"):
            close = (g64 == w64)
            if ulps:
                close |= (ulp_distance(got, want, d) <= ulps).reshape(
                    got.shape)
            if rtol or atol:
                close |= np.abs(g64 - w64) <= atol + rtol * np.abs(w64)
        bad = (gn != wn) | (~gn & ~wn & ~close)
    if np.any(bad):
        idx = np.argwhere(bad)[:5]
        lines = []
        for i in idx:
            i = tuple(i)
            gv, wv = got[i], want[i]
            if d == K.BF16:
                gv, wv = (f"{K.bf16_bits_to_f32(gv)!r} (0x{int(gv):04x})",
                          f"{K.bf16_bits_to_f32(wv)!r} (0x{int(wv):04x})")
            lines.append(f"  at {i}: kiln {gv!r}, numpy {wv!r}")
        raise AssertionError(
            f"{what}: {int(np.sum(bad))} of {bad.size} elements differ "
            f"(dtype {K.DTYPE_NAMES[d]}, ulps={ulps}, rtol={rtol}, "
            f"atol={atol}):\n" + "\n".join(lines))
