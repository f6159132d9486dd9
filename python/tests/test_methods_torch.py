"""The remaining Tensor methods and kiln functions against PyTorch 1.13 on
random inputs: more dtypes through the operators, shape functions,
scans, normalizing reductions, in-place unary methods, joins, where,
clamp and conversions."""
import operator

import numpy as np
import pytest
from hypothesis import given, strategies as st

import kiln
from conftest import examples, torch_or_skip
from test_tensor_torch import arrays, both, check

torch = torch_or_skip()


@examples(20)
@given(arrays(dtypes=["float16", "uint8", "int16", "bool", "float64"]),
       arrays(dtypes=["float16", "uint8", "int16", "bool", "float32"]),
       st.sampled_from([operator.add, operator.mul, operator.lt,
                        operator.eq]))
def test_promotion_across_dtypes(a, b, op):
    ka, ta = both(a)
    kb, tb = both(b)
    try:
        expect = op(ta, tb)
    except RuntimeError:
        with pytest.raises(kiln.KilnError):
            op(ka, kb).force()
        return
    check(op(ka, kb), expect, rtol=1e-3, atol=1e-3)


@examples(12)
@given(arrays(dtypes=["float32", "float64"], min_dims=1), st.data())
def test_scans_and_normalizers(a, data):
    ka, ta = both(a)
    dim = data.draw(st.integers(-a.ndim, a.ndim - 1))
    keep = data.draw(st.booleans())
    check(ka.cumsum(dim), ta.cumsum(dim), rtol=1e-4, atol=1e-5)
    check(ka.cumprod(dim), ta.cumprod(dim), rtol=1e-4, atol=1e-5)
    check(ka.softmax(dim), ta.softmax(dim), rtol=1e-4, atol=1e-6)
    check(ka.log_softmax(dim), ta.log_softmax(dim), rtol=1e-4, atol=1e-5)
    check(ka.logsumexp(dim, keep), ta.logsumexp(dim, keep), rtol=1e-4,
          atol=1e-5)
    check(ka.norm(2, dim, keep), ta.norm(2, dim, keep), rtol=1e-4,
          atol=1e-5)
    check(ka.prod(dim, keep), ta.prod(dim, keep), rtol=1e-4, atol=1e-5)
    check((ka > 0).all(dim, keep), (ta > 0).all(dim, keepdim=keep))
    check((ka > 0).any(dim, keep), (ta > 0).any(dim, keepdim=keep))
    if a.shape[dim] > 1:
        check(ka.var(dim, keepdim=keep), ta.var(dim, keepdim=keep),
              rtol=1e-4, atol=1e-5)
        check(ka.var(dim, unbiased=False), ta.var(dim, unbiased=False),
              rtol=1e-4, atol=1e-5)


@examples(12)
@given(arrays(dtypes=["float32", "float64"], min_dims=1))
def test_inplace_unary_and_binary_methods(a):
    ka, ta = both(a)
    other = np.flip(a).copy() + 0.5
    ko, to = both(other)
    for name in ["maximum", "minimum", "fmod", "remainder", "atan2", "pow"]:
        if name == "pow":
            check(ka.abs().pow(ko), ta.abs().pow(to), rtol=1e-4, atol=1e-5)
            continue
        check(getattr(ka, name)(ko), getattr(ta, name)(to), rtol=1e-5,
              atol=1e-6)
    for name in ["tanh_", "sigmoid_", "abs_", "sqrt_", "exp_", "neg_",
                 "floor_"]:
        getattr(ka, name)()
        getattr(ta, name)()
    check(ka, ta, rtol=1e-4, atol=1e-5)
    check(ka.clamp(-0.5, 0.5), ta.clamp(-0.5, 0.5))
    check(ka.clamp(min=0.1), ta.clamp(min=0.1))
    check(kiln.where(ka > 1, ka, ko), torch.where(ta > 1, ta, to))
    check(kiln.where(ka > 1, ka, 0.0), torch.where(ta > 1, ta,
                                                   torch.tensor(0.0,
                                                                dtype=ta.dtype)))


@examples(12)
@given(arrays(min_dims=1, max_dims=3), st.data())
def test_shape_functions_and_joins(a, data):
    ka, ta = both(a)
    dim = data.draw(st.integers(-a.ndim, a.ndim - 1))
    check(kiln.cat([ka, ka * 2], dim), torch.cat([ta, ta * 2], dim))
    check(kiln.stack([ka, ka], dim), torch.stack([ta, ta], dim))
    u = ka.unsqueeze(0)
    check(u.expand(3, *a.shape), ta.unsqueeze(0).expand(3, *a.shape))
    assert u.expand(3, *a.shape).stride()[0] == 0
    check(u.squeeze(0), ta.unsqueeze(0).squeeze(0))
    check(ka.squeeze(), ta.squeeze())
    n = a.shape[dim]
    size = data.draw(st.integers(1, n))
    step = data.draw(st.integers(1, 2))
    kv, tv = ka.unfold(dim, size, step), ta.unfold(dim, size, step)
    check(kv, tv)
    assert kv.stride() == tv.stride()
    for d in [kiln.float64, kiln.int32, kiln.bool, kiln.float16]:
        td = getattr(torch, d.name)
        check(ka.to(d), ta.to(td))
    check(ka.double(), ta.double())
    check(ka.long(), ta.long())
    assert [tuple(r.shape) for r in ka] == [tuple(r.shape) for r in ta]
    assert len(ka) == len(ta)


def test_module_functions_mirror_methods():
    a = np.array([[1.0, -2.0], [3.0, 0.5]], np.float32)
    ka, ta = both(a)
    check(kiln.exp(ka), torch.exp(ta))
    check(kiln.sum(ka, 1), torch.sum(ta, 1))
    check(kiln.matmul(ka, ka), torch.matmul(ta, ta))
    check(kiln.max(ka, 0).values, torch.max(ta, 0).values)
    check(kiln.transpose(ka, 0, 1), torch.transpose(ta, 0, 1))
    assert kiln.get_default_dtype() is kiln.float32
    assert kiln.is_tensor(ka) and not kiln.is_tensor(a)
    assert kiln.bool is kiln.bool_ and kiln.float is kiln.float32
