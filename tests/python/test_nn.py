"""Neural-network helpers and composed reductions vs NumPy: softmax,
log_softmax, layer_norm, logsumexp, var, std, norm, cumsum, cumprod.

Inputs are random shapes (up to 4 dims), F32 and F64, contiguous or
permuted / strided views, at magnitudes from 1 to 1e30 for the stable ops
(softmax, log_softmax, logsumexp subtract the maximum, so nothing
overflows). References are computed in float64 from the same values;
F32 results are compared with rtol 2e-5 (the subtraction x - max rounds in
F32), F64 with rtol 1e-11. Integer scans are exact (I64).
"""
import os

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import kiln_ctypes as K
import oracle as O
from conftest import examples

FLOATS = [K.F32, K.F64]
# one kernel per row op only with fusion on (numpy_diff_unfused sets 0)
FUSION_ON = os.environ.get("KILN_FUSE") != "0"
TOL = {K.F32: (2e-5, 1e-5), K.F64: (1e-11, 1e-12)}


def kiln_input(data, x, d):
    """A Kiln tensor with x's values (dtype d): contiguous, a permuted view
    of a contiguous tensor, or every other element of a larger one."""
    how = data.draw(st.sampled_from(["contiguous", "permuted", "strided"]),
                    label="layout")
    if how == "permuted" and x.ndim >= 2:
        perm = data.draw(st.permutations(range(x.ndim)), label="perm")
        inv = list(np.argsort(perm))
        base = K.from_numpy(np.ascontiguousarray(np.transpose(x, perm)), d)
        return K.permute(base, inv)
    if how == "strided" and x.ndim >= 1:
        big = np.zeros(x.shape[:-1] + (2 * x.shape[-1],), x.dtype)
        big[..., ::2] = x
        t = K.from_numpy(big, d)
        return K.slice(t, x.ndim - 1, 0, 2 * x.shape[-1], 2)
    return K.from_numpy(x, d)


def draw_float(data, min_size=1, max_dims=4, scale=None):
    d = data.draw(st.sampled_from(FLOATS), label="dtype")
    shape = tuple(data.draw(st.lists(st.integers(min_size, 6), min_size=1,
                                     max_size=max_dims), label="shape"))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    if scale is None:
        scale = data.draw(st.sampled_from([1.0, 10.0, 1e3, 1e30]),
                          label="scale")
    x = (rng.standard_normal(shape) * scale).astype(K.NP_DTYPE[d])
    return d, shape, x, kiln_input(data, x, d)


def close(got, want, d, what):
    rtol, atol = TOL[d]
    got = np.asarray(got, np.float64)
    want = np.asarray(want, np.float64)
    assert got.shape == want.shape, (what, got.shape, want.shape)
    ok = np.isclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
    assert ok.all(), (what, got[~ok][:5], want[~ok][:5])


def ref_softmax(x, axis, log):
    m = np.max(x, axis=axis, keepdims=True)
    xm = x - m
    s = np.sum(np.exp(xm), axis=axis, keepdims=True)
    return xm - np.log(s) if log else np.exp(xm) / s


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
@examples(120)
@given(data=st.data())
def test_softmax(log, data):
    d, shape, x, kt = draw_float(data)
    dim = data.draw(st.integers(-len(shape), len(shape) - 1), label="dim")
    r = (K.log_softmax if log else K.softmax)(kt, dim)
    assert r.dtype == d
    want = ref_softmax(x.astype(np.float64), dim, log)
    close(r.to_numpy(), want, d, f"{'log_' if log else ''}softmax"
          f"({K.DTYPE_NAMES[d]}{list(shape)}, {dim})")


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
def test_softmax_last_dim_is_one_kernel(log):
    x = K.from_numpy(np.random.default_rng(1).standard_normal((33, 70))
                     .astype(np.float32), K.F32)
    K.realize(x)
    K.profile_begin()
    K.realize((K.log_softmax if log else K.softmax)(x, -1))
    K.profile_end()
    assert K.profile_count() == 1 or not FUSION_ON


@examples(120)
@given(data=st.data())
def test_layer_norm(data):
    d, shape, x, kt = draw_float(data, scale=data.draw(
        st.sampled_from([1.0, 1e3, 1e12]), label="scale"))
    n = data.draw(st.integers(1, len(shape)), label="normalized_ndim")
    norm_shape = shape[len(shape) - n:]
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    w = b = None
    wn = np.ones(norm_shape)
    bn = np.zeros(norm_shape)
    if data.draw(st.booleans(), label="weight"):
        wn = rng.standard_normal(norm_shape).astype(K.NP_DTYPE[d])
        w = kiln_input(data, wn, d)
    if data.draw(st.booleans(), label="bias"):
        bn = rng.standard_normal(norm_shape).astype(K.NP_DTYPE[d])
        b = kiln_input(data, bn, d)
    eps = data.draw(st.sampled_from([1e-5, 1e-3, 0.0]), label="eps")
    r = K.layer_norm(kt, n, w, b, eps)
    assert r.dtype == d and r.shape == shape
    xf = x.astype(np.float64)
    axes = tuple(range(len(shape) - n, len(shape)))
    mu = xf.mean(axis=axes, keepdims=True)
    var = ((xf - mu) ** 2).mean(axis=axes, keepdims=True)
    with np.errstate(all="ignore"):
        want = (xf - mu) / np.sqrt(var + eps) * wn.astype(np.float64) + bn
    got = r.to_numpy().astype(np.float64)
    if eps == 0.0:  # constant rows divide 0 by 0: NaN in both
        keep = np.broadcast_to(var > 0, want.shape)
        got, want = got[keep], want[keep]
    close(got, want, d, f"layer_norm({K.DTYPE_NAMES[d]}{list(shape)}, {n})")


def test_layer_norm_one_kernel_and_errors():
    x = K.from_numpy(np.random.default_rng(2).standard_normal((8, 64))
                     .astype(np.float32), K.F32)
    w = K.ones(K.F32, [64])
    K.realize(x)
    K.profile_begin()
    K.realize(K.layer_norm(x, 1, w, w, 1e-5))
    K.profile_end()
    assert K.profile_count() == 1 or not FUSION_ON
    with pytest.raises(K.KilnError, match="weight"):
        K.layer_norm(x, 1, K.ones(K.F32, [63]), None, 1e-5)
    with pytest.raises(K.KilnError, match="normalized_ndim 3"):
        K.layer_norm(x, 3, None, None, 1e-5)
    with pytest.raises(K.KilnError, match="float"):
        K.softmax(K.ones(K.I32, [3]), 0)


def draw_dims(data, ndim):
    if ndim == 0 or data.draw(st.integers(0, 3), label="all dims?") == 0:
        return [], tuple(range(ndim))
    ds = data.draw(st.lists(st.integers(0, ndim - 1), min_size=1,
                            max_size=ndim, unique=True), label="dims")
    arg = [x - ndim if data.draw(st.booleans(), label="neg") else x
           for x in ds]
    return arg, tuple(sorted(ds))


@examples(120)
@given(data=st.data())
def test_logsumexp(data):
    d, shape, x, kt = draw_float(data, min_size=0)
    special = data.draw(st.sampled_from(["none", "-inf", "+inf"]),
                        label="special")
    if special != "none" and x.size:
        x = x.copy()
        mask = np.random.default_rng(x.size).random(x.shape) < 0.5
        x[mask] = -np.inf if special == "-inf" else np.inf
        kt = kiln_input(data, x, d)
    arg, axes = draw_dims(data, len(shape))
    keep = data.draw(st.booleans(), label="keepdim")
    r = K.logsumexp(kt, arg, keep)
    assert r.dtype == d
    xf = x.astype(np.float64)
    with np.errstate(all="ignore"):
        if xf.size and all(shape[a] for a in axes):
            m = np.max(xf, axis=axes, keepdims=True)
        else:
            m = np.zeros(np.sum(xf, axis=axes, keepdims=True).shape)
        m0 = np.where(np.isinf(m), 0.0, m)
        want = np.log(np.sum(np.exp(xf - m0), axis=axes, keepdims=True)) + m0
    if not keep:
        want = np.squeeze(want, axis=axes) if axes else want
    close(r.to_numpy(), want, d, f"logsumexp({K.DTYPE_NAMES[d]}"
          f"{list(shape)}, {arg}, {keep}, {special})")


def test_logsumexp_ints_and_one_kernel():
    r = K.logsumexp(K.from_numpy(np.array([1, 2, 3], np.int32), K.I32),
                    [], False)
    assert r.dtype == K.F32
    assert abs(r.to_numpy() - np.log(np.exp([1, 2, 3]).sum())) < 1e-5
    x = K.from_numpy(np.random.default_rng(3).standard_normal((40, 50)),
                     K.F64)
    K.realize(x)
    K.profile_begin()
    K.realize(K.logsumexp(x, [-1], False))
    K.profile_end()
    assert K.profile_count() == 1 or not FUSION_ON


@pytest.mark.parametrize("name", ["var", "std"])
@examples(100)
@given(data=st.data())
def test_var_std(name, data):
    d, shape, x, kt = draw_float(data, min_size=0, scale=data.draw(
        st.sampled_from([1.0, 1e3, 1e12]), label="scale"))
    offset = data.draw(st.sampled_from([0.0, 1e3]), label="offset")
    if offset:
        x = (x + offset).astype(x.dtype)
        kt = kiln_input(data, x, d)
    arg, axes = draw_dims(data, len(shape))
    corr = data.draw(st.integers(0, 2), label="correction")
    keep = data.draw(st.booleans(), label="keepdim")
    r = getattr(K, name)(kt, arg, corr, keep)
    assert r.dtype == d
    xf = x.astype(np.float64)
    n = int(np.prod([shape[a] for a in axes])) if axes else 1
    with np.errstate(all="ignore"):
        mu = np.sum(xf, axis=axes, keepdims=True) / n
        ss = np.sum((xf - mu) ** 2, axis=axes, keepdims=keep)
        want = ss / max(n - corr, 0)
        if name == "std":
            want = np.sqrt(want)
    got = r.to_numpy().astype(np.float64)
    # F32: the mean rounds to F32 (error e <= ulp(max|x|)), which adds up
    # to e^2 to the variance and e to the standard deviation.
    if d == K.F32:
        e = 2.0**-23 * np.max(np.abs(xf), initial=0)
        slack = e * e if name == "var" else e
        with np.errstate(invalid="ignore"):
            ok = np.isclose(got, want, rtol=2e-5, atol=1e-5, equal_nan=True) \
                | (np.abs(got - want) <= 4 * slack)
        assert ok.all(), (name, shape, arg, corr, got[~ok][:5], want[~ok][:5])
    else:
        close(got, want, d, f"{name}({list(shape)}, {arg}, {corr}, {keep})")


@examples(120)
@given(data=st.data())
def test_norm(data):
    d, shape, x, kt = draw_float(data, min_size=1)
    p = data.draw(st.sampled_from([2.0, 1.0, np.inf, -np.inf, 0.0, 3.0,
                                   0.5]), label="p")
    if x.size and data.draw(st.booleans(), label="zeros"):
        x = x.copy()
        x[np.random.default_rng(5).random(x.shape) < 0.3] = 0
        kt = kiln_input(data, x, d)
    arg, axes = draw_dims(data, len(shape))
    keep = data.draw(st.booleans(), label="keepdim")
    r = K.norm(kt, p, arg, keep)
    assert r.dtype == d
    a = np.abs(x.astype(np.float64))
    with np.errstate(all="ignore"):
        if p == np.inf:
            want = np.max(a, axis=axes, keepdims=keep)
        elif p == -np.inf:
            want = np.min(a, axis=axes, keepdims=keep)
        elif p == 0:
            want = np.sum(a != 0, axis=axes, keepdims=keep).astype(np.float64)
        else:
            want = np.sum(a ** p, axis=axes, keepdims=keep) ** (1 / p)
    # the F64 result is rounded once to d: compare against want rounded
    want = np.asarray(want).astype(K.NP_DTYPE[d]).astype(np.float64)
    close(r.to_numpy(), want, d, f"norm({K.DTYPE_NAMES[d]}{list(shape)}, "
          f"{p}, {arg}, {keep})")


@pytest.mark.parametrize("name", ["cumsum", "cumprod"])
@examples(120)
@given(data=st.data())
def test_scan(name, data):
    d = data.draw(st.sampled_from([K.F32, K.F64, K.I32, K.I64, K.U8, K.BOOL,
                                   K.I16]), label="dtype")
    shape = tuple(data.draw(st.lists(st.integers(0, 7), max_size=4),
                            label="shape"))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    if K.is_float(d):
        lo = 0.5 if name == "cumprod" else -1
        x = (rng.uniform(lo, 1.5, shape)).astype(K.NP_DTYPE[d])
    else:
        x = O.random_values(rng, d, shape, "small")
    kt = kiln_input(data, x, d)
    dim = data.draw(st.integers(-max(len(shape), 1),
                                max(len(shape), 1) - 1), label="dim")
    r = getattr(K, name)(kt, dim)
    assert r.shape == shape
    f = np.cumsum if name == "cumsum" else np.cumprod
    what = f"{name}({K.DTYPE_NAMES[d]}{list(shape)}, {dim})"
    if not K.is_float(d):
        assert r.dtype == K.I64, what
        xi = x.astype(np.int64)
        with np.errstate(over="ignore"):
            want = f(xi, axis=dim) if len(shape) else xi
        O.assert_same(r.to_numpy(), want.astype(np.int64), K.I64, what=what)
        return
    assert r.dtype == d, what
    want = f(x.astype(np.float64), axis=dim) if len(shape) else x
    close(r.to_numpy(), want, d, what)


@pytest.mark.parametrize("name", ["cumsum", "cumprod"])
@examples(40)
@given(data=st.data())
def test_scan_wide(name, data):
    """Last size a multiple of 16: scans over other dims run 16 columns at
    a time (when the last dim is read with unit stride)."""
    d = data.draw(st.sampled_from([K.F32, K.F64, K.I64, K.I8]), label="dtype")
    lead = data.draw(st.lists(st.integers(1, 5), min_size=1, max_size=2),
                     label="lead")
    shape = tuple(lead) + (16 * data.draw(st.integers(1, 3), label="w"),)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    if K.is_float(d):
        x = rng.uniform(0.5, 1.5, shape).astype(K.NP_DTYPE[d])
    else:
        x = O.random_values(rng, d, shape, "small")
    kt = kiln_input(data, x, d)
    dim = data.draw(st.integers(0, len(shape) - 1), label="dim")
    r = getattr(K, name)(kt, dim)
    f = np.cumsum if name == "cumsum" else np.cumprod
    if K.is_float(d):
        close(r.to_numpy(), f(x.astype(np.float64), axis=dim), d, name)
    else:
        with np.errstate(over="ignore"):
            want = f(x.astype(np.int64), axis=dim)
        O.assert_same(r.to_numpy(), want, K.I64, what=name)


def test_scan_errors():
    with pytest.raises(K.KilnError, match="kiln_cumsum: dim 2"):
        K.cumsum(K.ones(K.F32, [2, 3]), 2)
    with pytest.raises(K.KilnError, match="kiln_var"):
        K.var(K.ones(K.I32, [3]), [], 1, False)
