"""repr(kiln tensor) is Torch 1.13's repr of the same values, with "torch."
read as "kiln."."""
import numpy as np
from hypothesis import given, strategies as st

import kiln
from conftest import examples, torch_or_skip

torch = torch_or_skip()


def same_repr(a):
    k, t = kiln.tensor(a), torch.from_numpy(np.array(a))
    assert repr(k) == repr(t).replace("torch.", "kiln."), (repr(k), repr(t))


@examples(60)
@given(st.lists(st.integers(1, 5), max_size=3), st.sampled_from(
    ["float32", "float64", "int64", "int32", "bool", "float16", "uint8"]),
    st.sampled_from([1e-6, 1e-2, 1, 1e3, 1e9]), st.integers(0, 10**6))
def test_repr_matches_torch(shape, dtype, scale, seed):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(shape) * scale
    if dtype == "float16":
        a = np.clip(a, -6e4, 6e4)      # float16's range
    if dtype == "bool":
        a = a > 0
    elif dtype in ("int64", "int32", "uint8"):
        a = np.abs(a) % 200
    same_repr(a.astype(dtype))


def test_repr_special_cases():
    same_repr(np.array([1.0, 2.0, 3.0], np.float32))        # integer-valued
    same_repr(np.array([np.nan, np.inf, -1.5], np.float32))
    same_repr(np.zeros((0,), np.float32))
    same_repr(np.zeros((2, 0), np.int64))
    same_repr(np.arange(2000, dtype=np.float32).reshape(40, 50))  # summary
    same_repr(np.arange(30, dtype=np.float64) / 7)               # wraps
    same_repr(np.float32(3.25))
    k = kiln.zeros(2, requires_grad=True)
    t = torch.zeros(2, requires_grad=True)
    assert repr(k) == repr(t)
