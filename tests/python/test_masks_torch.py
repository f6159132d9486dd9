"""Masks and constructors against PyTorch 1.13: kiln_tril / kiln_triu
(random shapes with 0-size dims, batches, transposed views, diagonals
beyond the matrix, every dtype including NaN/inf values), kiln_eye,
kiln_full_like / zeros_like / ones_like, and Torch's errors for them.
kiln_randint and kiln_randperm draw from Kiln's own generator, not
Torch's: only their ranges, dtypes, permutation property and
reproducibility are checked (and that they raise where Torch does).
Skips with torch absent (Debian python3-torch; scripts/setup.sh installs
it).
"""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import examples, import_torch  # noqa: E402

torch = import_torch("masks'")

import kiln_ctypes as K  # noqa: E402
import oracle as O  # noqa: E402

torch.set_num_threads(1)

TORCH_DTYPE = {K.BOOL: torch.bool, K.U8: torch.uint8, K.I8: torch.int8,
               K.I16: torch.int16, K.I32: torch.int32, K.I64: torch.int64,
               K.F16: torch.float16, K.BF16: torch.bfloat16,
               K.F32: torch.float32, K.F64: torch.float64}
DTYPES = st.sampled_from(K.ALL_DTYPES)


def to_torch(x, d):
    """NumPy values of Kiln dtype d (BF16: uint16 bits) as a Torch tensor."""
    if d == K.BF16:
        return torch.from_numpy(O.as_f32(x, d).copy()).to(torch.bfloat16)
    return torch.from_numpy(np.array(x, copy=True))


def from_torch(t, d):
    """A Torch tensor's values in Kiln's NumPy representation of d."""
    t = t.contiguous()
    if d == K.BF16:
        return K.f32_to_bf16_bits(t.float().numpy())
    return t.numpy()


def pair(x, d, transposed):
    """x as a Kiln and a Torch tensor; transposed: both read through the
    transpose of their last two dims (x is given in that transposed
    layout's source shape)."""
    k, t = K.from_numpy(x, d), to_torch(x, d)
    if transposed:
        k, t = K.transpose(k, -1, -2), t.transpose(-1, -2)
    return k, t


@examples(150)
@given(d=DTYPES,
       shape=st.lists(st.integers(0, 4), min_size=2, max_size=4),
       diagonal=st.integers(-6, 6),
       transposed=st.booleans(),
       seed=st.integers(0, 2**32 - 1))
def test_tril_triu(d, shape, diagonal, transposed, seed):
    x = O.random_values(np.random.default_rng(seed), d, shape, "special")
    k, t = pair(x, d, transposed)
    for kf, tf, name in ((K.tril, torch.tril, "tril"),
                         (K.triu, torch.triu, "triu")):
        got = kf(k, diagonal)
        assert got.dtype == d and got.shape == tuple(t.shape)
        assert K.is_contiguous(got)
        O.assert_same(got.to_numpy(), from_torch(tf(t, diagonal), d), d,
                      what=f"{name}({shape}, {diagonal})")
    # the source is untouched
    O.assert_same(k.to_numpy(), from_torch(t, d), d, what="source")


def test_tril_triu_extreme_diagonals():
    # Torch 1.13 overflows at diagonal 2**63 - 1 (tril keeps nothing, triu
    # drops one corner); Kiln keeps all (tril) and nothing (triu) there,
    # as for any diagonal >= C: tested in tests/test_masks.c, not here.
    x = np.arange(1, 13, dtype=np.float32).reshape(3, 4)
    k, t = pair(x, K.F32, False)
    for diagonal in (-2**63, -2**62, -2**40, -4, -3, 3, 4, 2**40, 2**62):
        for kf, tf in ((K.tril, torch.tril), (K.triu, torch.triu)):
            O.assert_same(kf(k, diagonal).to_numpy(),
                          tf(t, diagonal).numpy(), K.F32,
                          what=f"diagonal {diagonal}")


@pytest.mark.parametrize("shape", [(), (5,), (0,)])
def test_tril_triu_need_two_dims(shape):
    # Torch 1.13 raises IndexError ("Dimension out of range") for 0-d and
    # 1-d inputs, except an empty 1-d one, which it returns unchanged
    # (its numel-0 shortcut runs before the check); Kiln rejects every
    # input with fewer than 2 dims.
    x = np.zeros(shape, np.float32)
    k, t = K.from_numpy(x, K.F32), torch.from_numpy(x)
    for kf, tf in ((K.tril, torch.tril), (K.triu, torch.triu)):
        if x.size:
            with pytest.raises(IndexError):
                tf(t, 0)
        with pytest.raises(K.KilnError) as e:
            kf(k, 0)
        assert e.value.status == K.ERR_SHAPE
        assert e.value.message.startswith("kiln_" + tf.__name__ + ":")


@examples(60)
@given(d=DTYPES, n=st.integers(0, 6), m=st.integers(-1, 6))
def test_eye(d, n, m):
    got = K.eye(d, n, m)
    m = n if m < 0 else m
    if d == K.BF16:  # Torch 1.13: "eye" not implemented for 'BFloat16'
        want = torch.eye(n, m).to(torch.bfloat16)
    else:
        want = torch.eye(n, m, dtype=TORCH_DTYPE[d])
    assert got.dtype == d and got.shape == tuple(want.shape)
    O.assert_same(got.to_numpy(), from_torch(want, d), d, what="eye")


def test_eye_errors():
    with pytest.raises(RuntimeError):
        torch.eye(-1)
    with pytest.raises(K.KilnError) as e:
        K.eye(K.F32, -1, 2)
    assert e.value.status == K.ERR_ARG and "kiln_eye" in e.value.message


def like_value(d, rng):
    """A value every dtype holds after Torch's and Kiln's cast (no
    out-of-range conversion, whose result C leaves undefined)."""
    if d == K.BOOL:
        return float(rng.integers(0, 2))
    if d == K.U8:
        return float(rng.integers(0, 256)) + rng.choice([0, 0.5])
    if K.is_int(d):
        return float(rng.integers(-100, 101)) + rng.choice([0, 0.75])
    return float(rng.choice([0.0, -0.0, 1.5, -3.25, 1e3, float("inf"),
                             float("nan"), rng.normal()]))


@examples(80)
@given(d=DTYPES,
       shape=st.lists(st.integers(0, 4), max_size=4),
       transposed=st.booleans(),
       seed=st.integers(0, 2**32 - 1))
def test_like(d, shape, transposed, seed):
    rng = np.random.default_rng(seed)
    transposed = transposed and len(shape) >= 2
    x = O.random_values(rng, d, shape, "small")
    k, t = pair(x, d, transposed)
    v = like_value(d, rng)
    for got, want, name in ((K.zeros_like(k), torch.zeros_like(t), "zeros"),
                            (K.ones_like(k), torch.ones_like(t), "ones"),
                            (K.full_like(k, v), torch.full_like(t, v),
                             f"full {v}")):
        assert got.dtype == d and got.shape == tuple(want.shape), name
        assert K.is_contiguous(got), name
        assert K.storage_of(got) != K.storage_of(k), name
        O.assert_same(got.to_numpy(), from_torch(want, d), d,
                      what=name + "_like")


@examples(40)
@given(d=st.sampled_from([d for d in K.ALL_DTYPES if d != K.BOOL]),
       low=st.integers(-20, 20), span=st.integers(1, 12),
       shape=st.lists(st.integers(0, 50), max_size=3),
       seed=st.integers(0, 2**63))
def test_randint(d, low, span, shape, seed):
    if d == K.U8:
        low = abs(low)
    high = low + span
    torch.randint(low, high, shape, dtype=TORCH_DTYPE[d])  # Torch accepts
    K.manual_seed(seed)
    a = K.randint(d, low, high, shape)
    assert a.dtype == d and a.shape == tuple(shape)
    v = O.as_f64(a.to_numpy(), d)
    assert ((v >= low) & (v < high) & (v == np.floor(v))).all()
    if v.size >= 20 * span:          # a small range is covered
        assert len(np.unique(v)) == span
    K.manual_seed(seed)
    b = K.randint(d, low, high, shape).to_numpy()
    assert a.to_numpy().tobytes() == b.tobytes()


@pytest.mark.parametrize("d,low,high", [
    (K.I64, 3, 3), (K.I64, 3, 2), (K.U8, -1, 3), (K.U8, 0, 257),
    (K.I8, -129, 0), (K.I8, 0, 129), (K.I16, 0, 40000),
    (K.F16, 0, 70000)])
def test_randint_errors(d, low, high):
    with pytest.raises(RuntimeError):
        torch.randint(low, high, (2,), dtype=TORCH_DTYPE[d])
    with pytest.raises(K.KilnError) as e:
        K.randint(d, low, high, [2])
    assert e.value.status == K.ERR_ARG and "kiln_randint" in e.value.message


def test_randint_bool_and_bounds():
    with pytest.raises(K.KilnError) as e:
        K.randint(K.BOOL, 0, 2, [2])
    assert e.value.status == K.ERR_DTYPE
    # the edges of a dtype's range are allowed, as in Torch
    for d, lo, hi in ((K.U8, 0, 256), (K.I8, -128, 128),
                      (K.I64, -2**63, 2**63 - 1)):
        torch.randint(lo, hi, (4,), dtype=TORCH_DTYPE[d])
        K.randint(d, lo, hi, [64]).to_numpy()


@examples(30)
@given(n=st.integers(0, 300), seed=st.integers(0, 2**63))
def test_randperm(n, seed):
    K.manual_seed(seed)
    p = K.randperm(n)
    assert p.dtype == K.I64 and p.shape == (n,)
    a = p.to_numpy()
    assert (np.sort(a) == np.arange(n)).all()
    assert (np.sort(torch.randperm(n).numpy()) == np.arange(n)).all()
    K.manual_seed(seed)
    assert (K.randperm(n).to_numpy() == a).all()


def test_randperm_errors():
    with pytest.raises(RuntimeError):
        torch.randperm(-1)
    with pytest.raises(K.KilnError) as e:
        K.randperm(-1)
    assert e.value.status == K.ERR_ARG and "kiln_randperm" in e.value.message
