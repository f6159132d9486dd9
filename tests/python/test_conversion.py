"""Conversion between every pair of dtypes (kiln_to_dtype, kiln_copy_) vs
NumPy's astype with Torch's rules (oracle.convert): float -> int truncates
toward zero, -> BOOL is x != 0, int -> narrower int wraps, -> F16/BF16
rounds to nearest even through float32.

Float -> int of a value outside the target's range, and NaN/inf -> int, are
undefined in C (Torch gives platform-dependent values): those inputs are
left out — values are drawn inside the target's range.
"""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import kiln_ctypes as K
import oracle as O
from conftest import examples

DT = K.ALL_DTYPES
PAIRS = [(a, b) for a in DT for b in DT]
PAIR_IDS = [f"{K.DTYPE_NAMES[a]}->{K.DTYPE_NAMES[b]}" for a, b in PAIRS]

# Largest magnitude (exclusive) that truncates into each integer dtype.
_LIMIT = {K.U8: (-0.99, 255.99), K.I8: (-128.99, 127.99),
          K.I16: (-32768.99, 32767.99), K.I32: (-2147483648.99, 2147483647.0),
          K.I64: (-9.2e18, 9.2e18)}


def values_for(rng, src, dst, shape):
    kind = "special" if K.is_float(src) and not K.is_int(dst) else "any"
    x = O.random_values(rng, src, shape, kind)
    if K.is_float(src) and K.is_int(dst):
        lo, hi = _LIMIT[dst]
        v = O.as_f64(x, src)
        # keep in range: scale out-of-range values into it
        v = np.where((v > lo) & (v < hi), v, np.fmod(v, 100.0))
        if dst == K.U8:
            v = np.abs(v)
        x = O.from_f64(v, src)
        v = O.as_f64(x, src)
        x = O.from_f64(np.where((v > lo) & (v < hi), v, 0.0), src)
    return x


@pytest.mark.parametrize("src,dst", PAIRS, ids=PAIR_IDS)
@examples(24)
@given(data=st.data())
def test_to_dtype(src, dst, data):
    shape = tuple(data.draw(st.lists(st.integers(0, 5), max_size=3)))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    x = values_for(rng, src, dst, shape)
    kt = K.from_numpy(x, src)
    if len(shape) >= 2:
        kt = K.transpose(K.from_numpy(np.ascontiguousarray(
            np.swapaxes(x, 0, 1)), src), 0, 1)
    r = K.to_dtype(kt, dst)
    assert r.dtype == dst and r.shape == shape
    O.assert_same(r.to_numpy(), O.convert(x, src, dst), dst,
                  what=f"to_dtype {K.DTYPE_NAMES[src]}->{K.DTYPE_NAMES[dst]}")
    if src == dst:
        return
    # the source is untouched, the result has its own storage
    assert K.storage_of(r) != K.storage_of(kt)


@pytest.mark.parametrize("src,dst", PAIRS, ids=PAIR_IDS)
def test_copy_converts(src, dst):
    """copy_ into a strided view of a dst tensor converts like to_dtype and
    leaves the other elements alone."""
    rng = np.random.default_rng(src * 16 + dst)
    x = values_for(rng, src, dst, (3, 4))
    base_vals = O.random_values(rng, dst, (3, 8), "small")
    base = K.from_numpy(base_vals, dst)
    view = K.slice(base, 1, 1, 8, 2)               # [3, 4], stride 2
    K.copy_(view, K.from_numpy(x, src))
    want = base_vals.copy()
    want[:, 1::2] = O.convert(x, src, dst)
    O.assert_same(base.to_numpy(), want, dst,
                  what=f"copy_ {K.DTYPE_NAMES[src]}->{K.DTYPE_NAMES[dst]}")


def test_bf16_rounding_ties():
    """f32 -> bf16 rounds to nearest even, ties included."""
    f = np.array([1.0 + 2**-8, 1.0 + 3 * 2**-8, 1.0 + 2**-9, -1.0 - 2**-8,
                  3.0e38, np.inf, -np.inf, 0.0, -0.0], np.float32)
    r = K.to_dtype(K.from_numpy(f), K.BF16).to_numpy()
    O.assert_same(r, K.f32_to_bf16_bits(f), K.BF16, what="bf16 ties")
    assert r[0] == 0x3F80 and r[1] == 0x3F82


def test_nan_conversions():
    f = np.array([np.nan, 1.0], np.float32)
    for d in (K.F16, K.BF16, K.F64):
        r = K.to_dtype(K.from_numpy(f), d).to_numpy()
        assert np.isnan(O.as_f64(r, d)[0])
    assert list(K.to_dtype(K.from_numpy(f), K.BOOL).to_numpy()) == [True,
                                                                    True]


def test_to_device():
    t = K.zeros(K.F32, [2])
    assert K.device_of(K.to_device(t, K.CPU)) == K.CPU
    with pytest.raises(K.KilnError) as e:
        K.to_device(t, K.CUDA)
    assert e.value.status == K.ERR_DEVICE
