"""kiln_linalg_solve and kiln_linalg_inv (ops/linalg_solve.c, LAPACK ?gesv via
OpenBLAS) against PyTorch 1.13: values and gradients w.r.t. A and B
(kiln_grad against autograd, random cotangent) for batched and unbatched
systems, matrix and vector right-hand sides, F32 and F64, transposed
(non-contiguous) inputs; a singular matrix fails the force; the errors.
Skips with torch absent.
"""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import examples, import_torch  # noqa: E402

torch = import_torch("linalg solve")

import kiln_ctypes as K  # noqa: E402
import test_nn_functional_torch as NF  # noqa: E402  (pair, check)

FLOATS = st.sampled_from([K.F32, K.F64])
# solving loses digits with the condition number: looser than NF's
TOL = {K.F32: dict(rtol=2e-4, atol=2e-5), K.F64: dict(rtol=1e-9, atol=1e-10)}


def well_conditioned(rng, batch, n, d):
    """Random matrices with a dominant diagonal (condition number ~ 10)."""
    a = rng.standard_normal(batch + [n, n]) + 3 * n ** 0.5 * np.eye(n)
    return a.astype(NF.NP[d])


def check(kout, tout, kins, tins, d, what):
    saved = NF.TOL
    NF.TOL = TOL
    try:
        NF.check(kout, tout, kins, tins, d, what)
    finally:
        NF.TOL = saved


@examples(60)
@given(d=FLOATS, batch=st.lists(st.integers(1, 3), max_size=2), n=st.integers(1, 6),
       k=st.integers(0, 4), transposed=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_solve(d, batch, n, k, transposed, seed):
    rng = np.random.default_rng(seed)
    a = well_conditioned(rng, batch, n, d)
    ka, ta, kav, tav = NF.pair(a, transposed)
    if k == 0:  # a batch of vectors
        n = max(n, 2)  # Torch 1.13's backward fails for A [1, 1] and a vector
        a = well_conditioned(rng, batch, n, d)
        ka, ta, kav, tav = NF.pair(a, transposed)
        b = rng.standard_normal(batch + [n]).astype(NF.NP[d])
    else:
        b = rng.standard_normal(batch + [n, k]).astype(NF.NP[d])
    kb, tb, kbv, tbv = NF.pair(b)
    check(K.linalg_solve(kav, kbv), torch.linalg.solve(tav, tbv), [ka, kb], [ta, tb], d,
          f"solve({batch}, {n}, {k}, {transposed})")


@examples(40)
@given(d=FLOATS, batch=st.lists(st.integers(1, 3), max_size=2), n=st.integers(1, 6),
       transposed=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_inv(d, batch, n, transposed, seed):
    a = well_conditioned(np.random.default_rng(seed), batch, n, d)
    ka, ta, kav, tav = NF.pair(a, transposed)
    check(K.linalg_inv(kav), torch.linalg.inv(tav), [ka], [ta], d, f"inv({batch}, {n})")


def test_second_order():
    """The gradient of the gradient (d/dA of sum(inv(A)) then summed)
    equals Torch's."""
    a = well_conditioned(np.random.default_rng(3), [], 4, K.F64)
    ka = K.from_numpy(a)
    ta = torch.from_numpy(a.copy()).requires_grad_(True)
    (kg,) = K.grad(K.sum(K.linalg_inv(ka), None, False), [ka])
    (kgg,) = K.grad(K.sum(K.mul(kg, kg), None, False), [ka])
    (tg,) = torch.autograd.grad(torch.linalg.inv(ta).sum(), ta, create_graph=True)
    (tgg,) = torch.autograd.grad((tg * tg).sum(), ta)
    np.testing.assert_allclose(kgg.to_numpy(), tgg.numpy(), rtol=1e-10)


def test_singular_and_errors():
    sing = K.from_numpy(np.array([[1.0, 2.0], [2.0, 4.0]]))
    x = K.linalg_inv(sing)  # lazy: the force finds it
    with pytest.raises(K.KilnError) as e:
        x.to_numpy()
    assert e.value.status == K.ERR_ARG and "singular" in e.value.message
    a = K.from_numpy(np.eye(3))
    cases = [(lambda: K.linalg_solve(K.from_numpy(np.zeros((3, 2))), a), K.ERR_SHAPE, "square"),
             (lambda: K.linalg_solve(a, K.from_numpy(np.zeros((4, 2)))), K.ERR_SHAPE, "B sizes [4, 2]"),
             (lambda: K.linalg_solve(a, K.from_numpy(np.zeros((3, 2), np.float32))), K.ERR_DTYPE, "differ"),
             (lambda: K.linalg_inv(K.from_numpy(np.zeros((2, 2), np.int64))), K.ERR_DTYPE, "float"),
             (lambda: K.linalg_inv(K.from_numpy(np.zeros(3))), K.ERR_SHAPE, "square")]
    for f, status, text in cases:
        with pytest.raises(K.KilnError) as e:
            f()
        assert e.value.status == status and text in e.value.message, (text, e.value.message)
