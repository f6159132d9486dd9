"""Reductions (sum mean prod amax amin all any argmax argmin) vs NumPy, over
random dim sets (negative dims included) with and without keepdim, on
contiguous and transposed inputs.

Result dtypes follow Torch: sum/prod of BOOL or integers give I64 (exact,
wrapping like int64 arithmetic); floats keep their dtype; mean needs a float
dtype; amax/amin keep the dtype; all/any give BOOL; argmax/argmin give I64
(first extremum). Float sums are compared with the error bound of
docs/testing.md: |kiln - exact| <= n·eps·Σ|x| (plus 1 ulp of F16/BF16).
"""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import kiln_ctypes as K
import oracle as O
from conftest import examples, run_in_child

DT = K.ALL_DTYPES
EPS = {K.F16: 2.0**-11, K.BF16: 2.0**-8, K.F32: 2.0**-24, K.F64: 2.0**-53}


def draw_input(data, dtypes, kind="small", min_size=0):
    d = data.draw(st.sampled_from(dtypes), label="dtype")
    shape = tuple(data.draw(st.lists(st.integers(min_size, 4), max_size=4),
                            label="shape"))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    x = O.random_values(rng, d, shape, kind)
    if len(shape) >= 2 and data.draw(st.booleans(), label="transposed"):
        kt = K.transpose(K.from_numpy(np.ascontiguousarray(
            np.swapaxes(x, 0, 1)), d), 0, 1)
    else:
        kt = K.from_numpy(x, d)
    return d, shape, x, kt


def draw_dims(data, ndim):
    """(dims passed to Kiln, normalized tuple) — [] means all dims."""
    if ndim == 0 or data.draw(st.integers(0, 4), label="all dims?") == 0:
        return [], tuple(range(ndim))
    ds = data.draw(st.lists(st.integers(0, ndim - 1), min_size=1,
                            max_size=ndim, unique=True), label="dims")
    arg = [x - ndim if data.draw(st.booleans(), label="neg") else x
           for x in ds]
    return arg, tuple(sorted(ds))


def float_bound_ok(got, exact, absx_sum, n, d, what):
    """|got - exact| <= n·eps·Σ|x| (+ 1 ulp of the result dtype)."""
    g = O.as_f64(got, d)
    bound = n * EPS[d] * absx_sum
    ulp = np.abs(exact) * EPS[d] * 2
    ok = np.isclose(g, exact, rtol=0, atol=0) | \
        (np.abs(g - exact) <= bound + ulp + 1e-300) | \
        (np.isnan(g) & np.isnan(exact))
    assert ok.all(), (what, g[~ok][:5], exact[~ok][:5])


@pytest.mark.parametrize("name", ["sum", "prod", "mean"])
@examples(160)
@given(data=st.data())
def test_sum_prod_mean(name, data):
    dtypes = DT if name != "mean" else K.FLOAT_DTYPES
    d, shape, x, kt = draw_input(data, dtypes, "small")
    if name == "prod" and K.is_float(d):
        x = O.from_f64(np.sign(O.as_f64(x, d)) *
                       np.exp2(np.round(O.as_f64(x, d) / 4)), d)
        kt = K.from_numpy(x, d)
    arg, axes = draw_dims(data, len(shape))
    keep = data.draw(st.booleans(), label="keepdim")
    r = getattr(K, name)(kt, arg, keep)
    n = int(np.prod([shape[a] for a in axes])) if axes else 1
    want_shape = np.sum(np.zeros(shape), axis=axes, keepdims=keep).shape
    assert r.shape == want_shape, (name, shape, arg, keep)
    what = f"{name}({K.DTYPE_NAMES[d]}{list(shape)}, {arg}, {keep})"
    if not K.is_float(d):
        assert r.dtype == K.I64, what
        xi = x.astype(np.int64)
        f = np.sum if name == "sum" else np.prod
        with np.errstate(over="ignore"):
            want = f(xi, axis=axes, keepdims=keep).astype(np.int64)
        O.assert_same(r.to_numpy(), want, K.I64, what=what)
        return
    assert r.dtype == d, what
    xf = O.as_f64(x, d)
    with np.errstate(all="ignore"):
        if name == "sum":
            exact = np.sum(xf, axis=axes, keepdims=keep)
            absx = np.sum(np.abs(xf), axis=axes, keepdims=keep)
        elif name == "mean":
            exact = np.mean(xf, axis=axes, keepdims=keep) if n else \
                np.full(want_shape, np.nan)
            absx = np.mean(np.abs(xf), axis=axes, keepdims=keep) if n else \
                np.zeros(want_shape)
        else:
            # products of powers of two are exact in every float dtype
            exact = np.prod(xf, axis=axes, keepdims=keep)
            absx = np.zeros(want_shape)
    exact = O.as_f64(O.from_f64(exact, d), d) if name == "prod" else exact
    float_bound_ok(r.to_numpy(), np.asarray(exact, np.float64),
                   np.asarray(absx), max(n, 1), d, what)


@pytest.mark.parametrize("name", ["amax", "amin", "all", "any"])
@examples(160)
@given(data=st.data())
def test_amax_amin_all_any(name, data):
    kind = "special" if name in ("all", "any") else "any"
    d, shape, x, kt = draw_input(data, DT, kind,
                                 min_size=1 if name in ("amax", "amin")
                                 else 0)
    arg, axes = draw_dims(data, len(shape))
    keep = data.draw(st.booleans(), label="keepdim")
    r = getattr(K, name)(kt, arg, keep)
    what = f"{name}({K.DTYPE_NAMES[d]}{list(shape)}, {arg}, {keep})"
    if name in ("all", "any"):
        f = np.all if name == "all" else np.any
        want = f(O.convert(x, d, K.BOOL), axis=axes, keepdims=keep)
        assert r.dtype == K.BOOL, what
        O.assert_same(r.to_numpy(), want, K.BOOL, what=what)
        return
    assert r.dtype == d, what
    f = np.max if name == "amax" else np.min
    if d == K.BF16:
        want = O.from_f32(f(O.as_f32(x, d), axis=axes, keepdims=keep), d)
    else:
        want = f(x, axis=axes, keepdims=keep)
    O.assert_same(r.to_numpy(), want, d, what=what)


@pytest.mark.parametrize("name", ["argmax", "argmin"])
@examples(160)
@given(data=st.data())
def test_argmax_argmin(name, data):
    """(0-d inputs: test_argmax_zero_dim.) BOOL is accepted (Torch rejects
    it): False < True."""
    d, shape, x, kt = draw_input(data, DT, "small", min_size=1)
    if len(shape) == 0:
        return
    dim = data.draw(st.integers(-len(shape), len(shape) - 1), label="dim")
    axis = dim % len(shape)
    keep = data.draw(st.booleans(), label="keepdim")
    r = getattr(K, name)(kt, dim, keep)
    assert r.dtype == K.I64
    xv = O.as_f32(x, d) if d == K.BF16 else x
    f = np.argmax if name == "argmax" else np.argmin
    want = f(xv, axis=axis, keepdims=keep)
    O.assert_same(r.to_numpy(), np.asarray(want, np.int64), K.I64,
                  what=f"{name}({K.DTYPE_NAMES[d]}{list(shape)}, {dim}, "
                       f"{keep})")


@pytest.mark.parametrize("name", ["argmax", "argmin"])
@pytest.mark.parametrize("d", [K.F32, K.I32], ids=["f32", "i32"])
def test_argmax_zero_dim(name, d):
    """Torch: argmax of a 0-d tensor (dim 0 or -1) is 0. Runs in a child
    process: the bug is undefined behaviour."""
    p = run_in_child(f"""
import kiln_ctypes as K
for dim in (0, -1):
    for keep in (False, True):
        r = K.{name}(K.scalar({d}, 3.0), dim, keep)
        assert r.shape == () and int(r.to_numpy()) == 0, (dim, keep)
print("ok")
""")
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr[-800:]


def test_nan_propagation():
    x = K.from_numpy(np.array([[1.0, np.nan, 3.0], [4.0, 5.0, 6.0]],
                              np.float32))
    assert np.isnan(K.amax(x, [1], False).to_numpy()[0])
    assert np.isnan(K.amin(x, [], False).to_numpy())
    assert K.amax(x, [1], False).to_numpy()[1] == 6.0
    # Torch: argmax/argmin treat NaN as the extremum
    assert list(K.argmax(x, 1, False).to_numpy()) == [1, 2]
    assert list(K.argmin(x, 1, False).to_numpy()) == [1, 0]
    assert np.isnan(K.sum(x, [], False).to_numpy())


def test_empty_reductions():
    e = K.zeros(K.F32, [2, 0])
    assert list(K.sum(e, [1], False).to_numpy()) == [0, 0]
    assert list(K.prod(e, [1], False).to_numpy()) == [1, 1]
    assert list(K.all(e, [1], False).to_numpy()) == [True, True]
    assert list(K.any(e, [1], False).to_numpy()) == [False, False]
    assert np.isnan(K.mean(e, [1], False).to_numpy()).all()
    for f in (K.amax, K.amin):
        with pytest.raises(K.KilnError) as err:
            f(e, [1], False)
        assert f.__name__ in err.value.message
    with pytest.raises(K.KilnError):
        K.argmax(e, 1, False)
    # reducing the non-empty dim of an empty tensor is fine
    assert K.amax(e, [0], False).shape == (0,)


def test_reduction_errors():
    i = K.zeros(K.I32, [2, 3])
    with pytest.raises(K.KilnError) as e:
        K.mean(i, [], False)
    assert e.value.status == K.ERR_DTYPE and "kiln_mean" in e.value.message
    with pytest.raises(K.KilnError) as e:
        K.sum(i, [0, 0], False)
    assert "kiln_sum" in e.value.message
    with pytest.raises(K.KilnError) as e:
        K.sum(i, [2], False)
    assert "kiln_sum" in e.value.message


def test_large_sum_accuracy():
    """A long f32 sum stays within the documented bound."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal(100003).astype(np.float32)
    r = K.sum(K.from_numpy(x), [], False).to_numpy()
    exact = np.sum(x.astype(np.float64))
    assert abs(float(r) - exact) <= 100003 * 2**-24 * np.abs(x).sum()
