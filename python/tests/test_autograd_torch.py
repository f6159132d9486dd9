"""kiln.grad and Tensor.backward against torch.autograd on random inputs:
composite functions, views and in-place writes in the graph, accumulation,
cotangents and second derivatives."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

import kiln
from conftest import examples, torch_or_skip

torch = torch_or_skip()

FUNCS = {
    "mlp": lambda x, w, m: ((x @ w).tanh() * 2 - 1).sigmoid().sum(),
    "softmax": lambda x, w, m: (x @ w).log_softmax(1).mean(),
    "views": lambda x, w, m: (x.T[1:] * w[:, :1].T.sum()).exp().sum(),
    "reduce": lambda x, w, m: (x.amax(1).sum() + x.std(0).sum()
                               + (w ** 2).mean()),
    "index": lambda x, w, m: (x[:, [0, 2]] ** 2).sum() + w[1:, 0].sum(),
    "where": lambda x, w, m: (x.relu() / (1 + w.abs().sum())).sum(),
}


def inputs(seed, n):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, 3)), rng.standard_normal((3, 4)))


@examples(20)
@given(st.sampled_from(sorted(FUNCS)), st.integers(0, 2**31 - 1),
       st.integers(1, 5))
def test_backward_matches_torch(name, seed, n):
    xa, wa = inputs(seed, n)
    f = FUNCS[name]
    kx = kiln.tensor(xa, dtype=kiln.float64, requires_grad=True)
    kw = kiln.tensor(wa, dtype=kiln.float64, requires_grad=True)
    tx = torch.tensor(xa, requires_grad=True)
    tw = torch.tensor(wa, requires_grad=True)
    ky, ty = f(kx, kw, kiln), f(tx, tw, torch)
    assert ky.requires_grad and not ky.is_leaf
    ky.backward()
    ty.backward()
    np.testing.assert_allclose(kx.grad.numpy(), tx.grad.numpy(), rtol=1e-9,
                               atol=1e-12)
    np.testing.assert_allclose(kw.grad.numpy(), tw.grad.numpy(), rtol=1e-9,
                               atol=1e-12)
    f(kx, kw, kiln).backward()        # accumulates, as Torch
    f(tx, tw, torch).backward()
    np.testing.assert_allclose(kx.grad.numpy(), tx.grad.numpy(), rtol=1e-9,
                               atol=1e-12)


def test_grad_with_cotangents_and_second_order():
    a = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]])
    kx = kiln.tensor(a, dtype=kiln.float64)
    tx = torch.tensor(a, requires_grad=True)
    cot = np.arange(6.0).reshape(2, 3)
    kg, = kiln.grad(kx.sin() * kx, kx, kiln.tensor(cot, dtype=kiln.float64))
    tg, = torch.autograd.grad(tx.sin() * tx, tx, torch.tensor(cot),
                              create_graph=True)
    np.testing.assert_allclose(kg.numpy(), tg.detach().numpy(), rtol=1e-12)
    kh, = kiln.grad(kg.sum(), kx)
    th, = torch.autograd.grad(tg.sum(), tx)
    np.testing.assert_allclose(kh.numpy(), th.numpy(), rtol=1e-12)


def test_grad_through_inplace_write_on_view():
    a = np.array([1.0, 2.0, 3.0, 4.0])
    kx = kiln.tensor(a, dtype=kiln.float64, requires_grad=True)
    tx = torch.tensor(a, requires_grad=True)
    ky, ty = kx * 1, tx * 1
    ky[1:3] *= kx[:2]
    ty[1:3] *= tx[:2]
    (ky ** 2).sum().backward()
    (ty ** 2).sum().backward()
    np.testing.assert_allclose(kx.grad.numpy(), tx.grad.numpy(), rtol=1e-12)


def test_grad_errors():
    x = kiln.tensor([1, 2, 3])
    with pytest.raises(kiln.KilnDtypeError):
        kiln.grad(x.sum(), x)
    y = kiln.ones(3)
    with pytest.raises(kiln.KilnArgumentError):
        kiln.grad(y * 2, y)          # no cotangent for a non-scalar
    with pytest.raises(kiln.KilnShapeError):
        kiln.grad(y * 2, y, kiln.ones(4))
    z = kiln.ones(2, requires_grad=True)
    assert (z * 2).requires_grad and kiln.ones(2).requires_grad is False
    unused = kiln.ones(3, requires_grad=True)
    (z * 3).sum().backward()
    np.testing.assert_array_equal(z.grad.numpy(), [3.0, 3.0])
    np.testing.assert_array_equal(unused.grad.numpy(), [0, 0, 0])
