"""matmul mm bmm mv dot addmm vs NumPy, on random shapes (1-D operands,
broadcast batch dims), dtypes and views: contiguous, transposed (a BLAS
transpose flag), expanded (stride-0 batch or row) and sliced (packed).

Float results are compared with the bound of docs/testing.md for a sum of
K products: |kiln - exact| <= K·eps·Σ|a·b| (+ 1 ulp of the result dtype),
computed in float64 from the operands' exact values. Integer products wrap
in the result dtype, as Torch's do; NumPy's int64 product, reduced modulo
2^bits, is exact.
"""
import os

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import kiln_ctypes as K
import oracle as O
from conftest import examples

EPS = {K.F16: 2.0**-11, K.BF16: 2.0**-8, K.F32: 2.0**-24, K.F64: 2.0**-53}
DTYPES = [K.F32, K.F64, K.F16, K.BF16, K.I32, K.I64, K.U8, K.I8]


def make_operand(data, rng, d, shape, label):
    """(numpy values, kiln tensor) for shape, in one of four layouts."""
    x = O.random_values(rng, d, shape, "small")
    layout = data.draw(st.sampled_from(
        ["contiguous", "transposed", "expanded", "sliced"]), label=label)
    if layout == "transposed" and len(shape) >= 2:
        swapped = np.ascontiguousarray(np.swapaxes(x, -1, -2))
        kt = K.transpose(K.from_numpy(swapped, d), -1, -2)
    elif layout == "expanded" and len(shape) >= 1 and shape[0] > 1:
        x = np.broadcast_to(x[:1], shape).copy()
        kt = K.expand(K.from_numpy(x[:1], d), list(shape))
    elif layout == "sliced" and len(shape) >= 1 and shape[-1] > 0:
        # every other element of doubled rows: stride 2 in the last dim,
        # which BLAS cannot take as it is (the operand is packed)
        wide = np.repeat(x, 2, axis=-1)
        base = K.from_numpy(wide, d)
        strides = list(K.strides(base))[:-1] + [2]
        kt = K.as_strided(base, list(shape), strides, 0)
    else:
        kt = K.from_numpy(x, d)
    return x, kt


def exact_product(xa, xb, da, db):
    fa, fb = O.as_f64(xa, da), O.as_f64(xb, db)
    return np.matmul(fa, fb), np.matmul(np.abs(fa), np.abs(fb))


def check(got, xa, xb, da, db, dres, k):
    if K.is_int(dres):
        ia = np.asarray(xa).astype(np.int64)
        ib = np.asarray(xb).astype(np.int64)
        want = np.matmul(ia, ib).astype(K.NP_DTYPE[dres])
        np.testing.assert_array_equal(got, want)
        return
    exact, mag = exact_product(xa, xb, da, db)
    g = O.as_f64(got, dres)
    bound = max(k, 1) * EPS[dres] * mag + np.abs(exact) * EPS[dres] * 2
    ok = np.abs(g - exact) <= bound + 1e-300
    assert np.all(ok), (g[~ok][:5], exact[~ok][:5])


def result_dtype(da, db):
    return O.promote(da, db)


@given(st.data())
@examples(120)
def test_matmul_vs_numpy(data):
    da = data.draw(st.sampled_from(DTYPES), label="da")
    db = data.draw(st.sampled_from([da, da, K.F32, K.F64]), label="db")
    dres = result_dtype(da, db)
    m, k, n = (data.draw(st.integers(0, 6), label=c) for c in "mkn")
    kind = data.draw(st.sampled_from(["2d", "batched", "vec_a", "vec_b",
                                      "vec_both"]), label="kind")
    batch_a = batch_b = ()
    if kind == "batched":
        nb = data.draw(st.integers(1, 2), label="batch ndim")
        batch = [data.draw(st.integers(1, 3)) for _ in range(nb)]
        batch_a = tuple(b if data.draw(st.booleans()) else 1 for b in batch)
        batch_b = tuple(batch[-data.draw(st.integers(0, nb)):]) if \
            data.draw(st.booleans()) else tuple(batch)
    sa = (k,) if kind in ("vec_a", "vec_both") else batch_a + (m, k)
    sb = (k,) if kind in ("vec_b", "vec_both") else batch_b + (k, n)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    xa, ta = make_operand(data, rng, da, sa, "layout a")
    xb, tb = make_operand(data, rng, db, sb, "layout b")
    r = K.matmul(ta, tb)
    want_shape = np.matmul(np.zeros(sa), np.zeros(sb)).shape
    assert r.shape == want_shape
    assert r.dtype == dres
    check(r.to_numpy(), xa, xb, da, db, dres, k)


@pytest.mark.parametrize("d", [K.F32, K.F64])
def test_transposed_operands_are_not_copied(d):
    rng = np.random.default_rng(1)
    xa = O.random_values(rng, d, (48, 32), "small")
    xb = O.random_values(rng, d, (40, 48), "small")
    ta = K.transpose(K.from_numpy(xa, d), 0, 1)     # [32, 48], row stride 1
    tb = K.transpose(K.from_numpy(xb, d), 0, 1)     # [48, 40]
    K.realize(ta)
    K.realize(tb)
    K.profile_begin()
    r = K.mm(ta, tb)
    got = r.to_numpy()
    K.profile_end()
    recs = K.profile_records()
    assert [x["backend"] for x in recs] == ["blas"], recs
    assert recs[0]["flops"] == 2 * 32 * 40 * 48
    check(got, xa.T, xb.T, d, d, d, 48)


FUSION_ON = os.environ.get("KILN_FUSE") != "0"


def test_epilogue_is_one_kernel():
    """relu(a @ b + bias) * 2: the BLAS call and one fused kernel (three
    elementwise kernels when the suite runs with KILN_FUSE=0)."""
    rng = np.random.default_rng(2)
    xa = O.random_values(rng, K.F32, (16, 8), "small")
    xb = O.random_values(rng, K.F32, (8, 12), "small")
    xc = O.random_values(rng, K.F32, (12,), "small")
    a, b, c = (K.from_numpy(x, K.F32) for x in (xa, xb, xc))
    for t in (a, b, c):
        K.realize(t)
    K.profile_begin()
    r = K.mul_scalar(K.relu(K.add(K.matmul(a, b), c)), 2.0)
    got = r.to_numpy()
    K.profile_end()
    recs = K.profile_records()
    kernels = ["llvm"] if FUSION_ON else ["llvm"] * 3
    assert [x["backend"] for x in recs] == ["blas"] + kernels, recs
    want = np.maximum(xa.astype(np.float64) @ xb + xc, 0) * 2
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@given(st.data())
@examples(40)
def test_addmm(data):
    d = data.draw(st.sampled_from([K.F32, K.F64, K.I64]), label="dtype")
    m, k, n = (data.draw(st.integers(1, 5), label=c) for c in "mkn")
    bias_shape = data.draw(st.sampled_from([(n,), (m, 1), (m, n), (), (1, n)]))
    beta = data.draw(st.sampled_from([0.0, 1.0, 0.5, -2.0]), label="beta")
    alpha = data.draw(st.sampled_from([1.0, 2.0, -0.25]), label="alpha")
    if K.is_int(d):
        beta, alpha = float(int(beta)), float(int(alpha) or 1)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    xa = O.random_values(rng, d, (m, k), "small")
    xb = O.random_values(rng, d, (k, n), "small")
    xc = O.random_values(rng, d, bias_shape, "small")
    r = K.addmm(K.from_numpy(xc, d), K.from_numpy(xa, d),
                K.from_numpy(xb, d), beta, alpha)
    fa, fb, fc = (x.astype(np.float64) for x in (xa, xb, xc))
    want = alpha * (fa @ fb)
    if beta != 0:
        want = want + beta * fc
    assert r.shape == (m, n)
    got = r.to_numpy().astype(np.float64)
    if K.is_int(d):
        np.testing.assert_array_equal(got, want)   # small integers: exact
        return
    # The bound of check() for the K-term sum, plus one rounding for the
    # bias add (alpha and beta are powers of two: scaling is exact), in
    # units of the dtype's eps: about 1e-16 relative for F64, 6e-8 for F32.
    mag = abs(alpha) * (np.abs(fa) @ np.abs(fb))
    if beta != 0:
        mag = mag + abs(beta) * np.abs(fc)
    bound = (k + 2) * EPS[d] * mag
    ok = np.abs(got - want) <= bound
    assert np.all(ok), (K.DTYPE_NAMES[d], got[~ok][:5], want[~ok][:5])


def test_addmm_beta_zero_ignores_nan_bias():
    bias = K.from_numpy(np.full((2, 2), np.nan, np.float32))
    a = K.from_numpy(np.eye(2, dtype=np.float32))
    r = K.addmm(bias, a, a, 0.0, 3.0)
    np.testing.assert_array_equal(r.to_numpy(), 3 * np.eye(2))


def test_mv_dot_bmm_values():
    a = np.arange(6, dtype=np.float64).reshape(2, 3)
    x = np.array([1.0, -1.0, 2.0])
    np.testing.assert_array_equal(K.mv(K.from_numpy(a), K.from_numpy(x))
                                  .to_numpy(), a @ x)
    d = K.dot(K.from_numpy(x), K.from_numpy(x))
    assert d.shape == () and d.to_numpy() == 6.0
    b = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    c = np.arange(40, dtype=np.float32).reshape(2, 4, 5)
    np.testing.assert_array_equal(
        K.bmm(K.from_numpy(b), K.from_numpy(c)).to_numpy(), b @ c)


@pytest.mark.parametrize("fn,sa,sb,msg", [
    ("matmul", (2, 3), (4, 5), "inner dims differ (3 and 4)"),
    ("matmul", (), (3,), "0-d operands"),
    ("matmul", (2, 2, 3), (3, 3, 4), "batch dims cannot be broadcast"),
    ("mm", (2, 3, 4), (4, 5), "a must be 2-D, got 3-D"),
    ("bmm", (2, 3, 4), (3, 4, 5), "batch sizes differ"),
    ("mv", (2, 3), (3, 1), "b must be 1-D, got 2-D"),
    ("dot", (3,), (4,), "inner dims differ (3 and 4)"),
])
def test_shape_errors(fn, sa, sb, msg):
    a = K.from_numpy(np.zeros(sa, np.float32))
    b = K.from_numpy(np.zeros(sb, np.float32))
    with pytest.raises(K.KilnError) as e:
        getattr(K, fn)(a, b)
    assert e.value.status == K.ERR_SHAPE
    assert e.value.message.startswith("kiln_" + fn)
    assert msg in e.value.message


def test_bool_matmul_is_a_dtype_error():
    a = K.from_numpy(np.ones((2, 2), np.bool_))
    with pytest.raises(K.KilnError) as e:
        K.matmul(a, a)
    assert e.value.status == K.ERR_DTYPE


def test_addmm_bias_shape_error():
    a = K.from_numpy(np.zeros((2, 3), np.float32))
    b = K.from_numpy(np.zeros((3, 4), np.float32))
    bias = K.from_numpy(np.zeros((3,), np.float32))
    with pytest.raises(K.KilnError) as e:
        K.addmm(bias, a, b, 1.0, 1.0)
    assert e.value.status == K.ERR_SHAPE
    assert "cannot be broadcast to [2, 4]" in e.value.message
