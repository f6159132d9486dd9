"""Tensor functions a PyTorch user reaches for (issue 36, item 5): values
and gradients against PyTorch 1.13 (Debian python3-torch).

  * asin acos atan sinh cosh asinh acosh atanh: first and second
    derivatives of sum(w * f(x)) against torch.autograd.grad in float64,
    at points inside each domain and at its edges (asin' at ±1 is inf,
    atanh at ±1 is ±inf, as Torch). Their values in every dtype are in
    test_elementwise.py (NumPy); the F32 ulp error over 4M points is in
    test_inverse_trig_ulps.
"""
import ctypes

import numpy as np
import pytest

from conftest import import_torch

torch = import_torch("tensor function")

import kiln_ctypes as K  # noqa: E402

# name -> (torch function, a sampler of points inside the domain)
TRIG = {
    "asin": (torch.asin, lambda r, n: r.uniform(-0.99, 0.99, n)),
    "acos": (torch.acos, lambda r, n: r.uniform(-0.99, 0.99, n)),
    "atan": (torch.atan, lambda r, n: r.standard_normal(n) * 5),
    "sinh": (torch.sinh, lambda r, n: r.standard_normal(n) * 5),
    "cosh": (torch.cosh, lambda r, n: r.standard_normal(n) * 5),
    "asinh": (torch.asinh, lambda r, n: r.standard_normal(n) * 50),
    "acosh": (torch.acosh, lambda r, n: 1.01 + np.exp(r.uniform(-5, 8, n))),
    "atanh": (torch.atanh, lambda r, n: r.uniform(-0.99, 0.99, n)),
}


def _close(got, want, rtol=1e-12, what=""):
    np.testing.assert_allclose(got, want, rtol=rtol, atol=1e-300,
                               equal_nan=True, err_msg=what)


@pytest.mark.parametrize("name", list(TRIG))
def test_inverse_trig_grad(name):
    tf, sample = TRIG[name]
    rng = np.random.default_rng(sum(map(ord, name)))
    x = sample(rng, 64)
    w = rng.standard_normal(64)
    kx, kw = K.from_numpy(x), K.from_numpy(w)
    ky = K.sum(K.mul(getattr(K, name)(kx), kw), [], False)
    (kg,) = K.grad(ky, [kx])
    # second derivative: d/dx sum(g * w)
    (kgg,) = K.grad(K.sum(K.mul(kg, kw), [], False), [kx])
    tx = torch.tensor(x, requires_grad=True)
    tw = torch.tensor(w)
    ty = (tf(tx) * tw).sum()
    (tg,) = torch.autograd.grad(ty, tx, create_graph=True)
    (tgg,) = torch.autograd.grad((tg * tw).sum(), tx)
    _close(ky.to_numpy(), ty.detach().numpy(), what=f"{name} value")
    _close(kg.to_numpy(), tg.detach().numpy(), what=f"{name}'")
    _close(kgg.to_numpy(), tgg.numpy(), rtol=1e-10, what=f"{name}''")


EDGES = np.array([-1.0, 1.0, -0.0, 0.0, 0.5, -2.0, 2.0, 1e10, -1e10,
                  np.inf, -np.inf, np.nan, 1e-300])


@pytest.mark.parametrize("name", list(TRIG))
@pytest.mark.parametrize("dtype", [K.F32, K.F64])
def test_inverse_trig_edges(name, dtype):
    """Values (incl. signed zeros, ±inf, NaN) and gradients at domain
    edges, against Torch in the same dtype."""
    tf = TRIG[name][0]
    npd = K.NP_DTYPE[dtype]
    x = EDGES.astype(npd)
    kx = K.from_numpy(x)
    ky = getattr(K, name)(kx)
    (kg,) = K.grad(K.sum(ky, [], False), [kx])
    tx = torch.tensor(x, requires_grad=True)
    ty = tf(tx)
    (tg,) = torch.autograd.grad(ty.sum(), tx)
    got, want = ky.to_numpy(), ty.detach().numpy()
    rtol = 4 * np.finfo(npd).eps
    _close(got, want, rtol=rtol, what=f"{name} at {x}")
    assert (np.signbit(got) == np.signbit(want))[~np.isnan(want)].all(), \
        (name, got, want)
    # gradients: same formula as Torch, so the same infinities and NaNs
    _close(kg.to_numpy(), tg.numpy(), rtol=rtol, what=f"{name}' at {x}")


def test_inverse_trig_ulps():
    """F32 results (vector math of codegen_llvm/llvm_math.c, composed in
    passes/semantics_trig.c) within 4 ulp of the correctly rounded value
    over 1M log-spaced magnitudes, 1M points in (-1, 1) and 2M within
    1e-7..1 of ±1; NaN and infinities exactly where NumPy's are."""
    rng = np.random.default_rng(7)
    n = 1 << 20
    mag = np.exp(rng.uniform(np.log(1e-30), np.log(3e38), n)) \
        * rng.choice([-1, 1], n)
    near1 = 1 + rng.uniform(-1, 1, n) * np.exp(rng.uniform(np.log(1e-7), 0, n))
    x = np.concatenate([mag, rng.uniform(-1, 1, n), near1, -near1]) \
        .astype(np.float32)
    refs = dict(asin=np.arcsin, acos=np.arccos, atan=np.arctan,
                sinh=np.sinh, cosh=np.cosh, asinh=np.arcsinh,
                acosh=np.arccosh, atanh=np.arctanh)
    for name, f in refs.items():
        got = getattr(K, name)(K.from_numpy(x)).to_numpy()
        with np.errstate(all="ignore"):
            want = f(x.astype(np.float64)).astype(np.float32)
        fin = np.isfinite(want)
        assert (np.isnan(got) == np.isnan(want)).all(), name
        assert (got[~fin] == want[~fin])[~np.isnan(want[~fin])].all(), name
        ulp = np.abs(got[fin].astype(np.float64) - want[fin]) \
            / np.spacing(np.abs(want[fin])).astype(np.float64)
        assert ulp.max() <= 4, (name, ulp.max(), x[fin][ulp.argmax()])


# ------------------------------------------------- isnan, isclose, equal

TORCH_DT = {K.BOOL: torch.bool, K.U8: torch.uint8, K.I8: torch.int8,
            K.I16: torch.int16, K.I32: torch.int32, K.I64: torch.int64,
            K.F16: torch.float16, K.BF16: torch.bfloat16,
            K.F32: torch.float32, K.F64: torch.float64}
SPECIAL = np.array([0.0, -0.0, 1.5, -2.0, np.inf, -np.inf, np.nan, 1e30,
                    -7.0, 3.0, 65504.0, 1e-30], np.float32)


def pair(values, d):
    """(kiln tensor, torch tensor) of dtype d from float32 values, both
    converted (rounded, or truncated for integers) the same way."""
    t = torch.from_numpy(np.array(values, np.float32)).to(TORCH_DT[d])
    k = K.to_dtype(K.from_numpy(np.array(values, np.float32)), d)
    return k, t


def as_np(k):
    v = k.to_numpy()
    return K.bf16_bits_to_f32(v) if k.dtype == K.BF16 else v


@pytest.mark.parametrize("d", K.ALL_DTYPES, ids=lambda d: K.DTYPE_NAMES[d])
def test_isnan_isinf_isfinite(d):
    vals = SPECIAL if K.is_float(d) else np.array([0, 1, -3, 7, 100], np.float32)
    if d == K.BOOL:
        vals = np.array([0, 1, 1, 0], np.float32)
    k, t = pair(vals.reshape(-1, 1) * np.ones((1, 3), np.float32), d)
    k = K.transpose(k, 0, 1)   # a strided view
    t = t.t()
    for name in ("isnan", "isinf", "isfinite"):
        r = getattr(K, name)(k)
        assert r.dtype == K.BOOL
        np.testing.assert_array_equal(r.to_numpy(), getattr(torch, name)(t).numpy(), err_msg=name)


def _allclose(a, b, rtol, atol, equal_nan):
    out = ctypes.c_bool(True)
    st = K.lib.kiln_allclose(a.handle, b.handle, rtol, atol, equal_nan, ctypes.byref(out))
    return st, out.value


def _equal(a, b):
    out = ctypes.c_bool(True)
    st = K.lib.kiln_equal(a.handle, b.handle, ctypes.byref(out))
    return st, out.value


@pytest.mark.parametrize("d", [K.F32, K.F64, K.F16, K.I64, K.I32, K.BOOL],
                         ids=lambda d: K.DTYPE_NAMES[d])
@pytest.mark.parametrize("tol", [(1e-5, 1e-8), (0.0, 0.0), (0.1, 0.5), (1e-3, 0.0)])
@pytest.mark.parametrize("equal_nan", [False, True])
def test_isclose_allclose(d, tol, equal_nan):
    rng = np.random.default_rng(3)
    a = rng.choice(SPECIAL, (4, 5))
    b = np.where(rng.random((4, 5)) < 0.5, a, a * (1 + rng.choice([1e-6, 1e-4, 1e-2, 0.3], (4, 5))))
    b = np.where(rng.random((4, 5)) < 0.1, rng.choice(SPECIAL, (4, 5)), b)
    if not K.is_float(d):
        a, b = np.nan_to_num(a, posinf=5, neginf=-5) % 9, np.nan_to_num(b, posinf=5, neginf=-5) % 9
        a, b = np.round(a), np.round(b)
    ka, ta = pair(a, d)
    kb, tb = pair(b[0], d)       # broadcast [5] against [4, 5]
    got = K.isclose(ka, kb, tol[0], tol[1], equal_nan).to_numpy()
    want = torch.isclose(ta, tb, tol[0], tol[1], equal_nan).numpy()
    np.testing.assert_array_equal(got, want)
    assert _allclose(ka, kb, tol[0], tol[1], equal_nan) == \
        (K.OK, torch.allclose(ta, tb, tol[0], tol[1], equal_nan))
    same = K.clone(ka)
    assert _allclose(ka, same, tol[0], tol[1], equal_nan) == \
        (K.OK, torch.allclose(ta, ta.clone(), tol[0], tol[1], equal_nan))


def test_isclose_errors():
    a, b = K.from_numpy(np.ones(3, np.float32)), K.from_numpy(np.ones(3))
    with pytest.raises(K.KilnError) as e:
        K.isclose(a, b, 1e-5, 1e-8, False)
    assert e.value.status == K.ERR_DTYPE and "kiln_isclose" in e.value.message
    st, v = _allclose(a, K.from_numpy(np.ones(4, np.float32)), 1e-5, 1e-8, False)
    assert st == K.ERR_SHAPE and v is True      # out untouched
    K.clear_error()
    st, _ = _allclose(a, a, -1.0, 0.0, False)
    assert st == K.ERR_ARG and "rtol -1" in K.last_error()
    K.clear_error()
    assert K.lib.kiln_equal(a.handle, a.handle, None) == K.ERR_ARG
    K.clear_error()


def test_equal():
    x = np.array([[1.0, 2.0, np.nan], [0.0, -0.0, 3.0]])
    cases = [(x[:, :2], x[:, :2]), (x, x), (x[1], x[1]), (x[:, :2], x[:, :2].T),
             (x[0, :2], x[0, :2] + 1), (np.zeros((2, 0)), np.zeros((2, 0))),
             (np.zeros(3), np.zeros(1)), (x[1], np.array([0, 0, 3], np.int64))]
    for a, b in cases:
        ka, kb = K.from_numpy(np.ascontiguousarray(a)), K.from_numpy(np.ascontiguousarray(b))
        assert _equal(ka, kb) == (K.OK, torch.equal(torch.tensor(a), torch.tensor(b))), (a, b)
    k = K.from_numpy(x)
    assert _equal(K.t(k), K.contiguous(K.t(k)))[1] is False   # the NaN
    fin = K.from_numpy(x[:, :2])
    assert _equal(K.t(fin), K.contiguous(K.t(fin))) == (K.OK, True)


# ------------------------------------------ flip, roll, outer, lerp, one_hot

def check_fn(kfn, tfn, arrays, rtol=1e-12, grad=True):
    """kfn(*kiln inputs) against tfn(*torch inputs) in float64: values, and
    with grad the vector-Jacobian product for a random cotangent."""
    rng = np.random.default_rng(11)
    ks = [K.from_numpy(np.array(a, np.float64, order="C")) for a in arrays]
    ts = [torch.tensor(np.asarray(a, np.float64), requires_grad=grad) for a in arrays]
    ky, ty = kfn(*ks), tfn(*ts)
    assert ky.shape == tuple(ty.shape), (ky.shape, ty.shape)
    _close(ky.to_numpy(), ty.detach().numpy(), rtol=rtol, what="value")
    if not grad:
        return
    c = rng.standard_normal(tuple(ty.shape))
    kg = K.grad([ky], ks, [K.from_numpy(c)])
    tg = torch.autograd.grad(ty, ts, torch.tensor(c), allow_unused=True)
    for j, (g, w) in enumerate(zip(kg, tg)):
        want = np.zeros(arrays[j].shape) if w is None else w.numpy()
        _close(g.to_numpy(), want, rtol=rtol, what=f"gradient {j}")


FLIP_CASES = [((3, 4), [0]), ((3, 4), [1]), ((3, 4), [-1, 0]), ((2, 3, 4), [0, 2]),
              ((2, 1, 4), [1]), ((0, 3), [0, 1]), ((5,), [0]), ((), []), ((2, 3), [])]


@pytest.mark.parametrize("shape,dims", FLIP_CASES, ids=str)
def test_flip(shape, dims):
    x = np.random.default_rng(1).standard_normal(shape)
    check_fn(lambda t: K.flip(t, dims), lambda t: torch.flip(t, dims), [x])
    # through a transposed view, with its gradient
    if len(shape) >= 2:
        check_fn(lambda t: K.flip(K.transpose(t, 0, -1), dims),
                 lambda t: torch.flip(t.transpose(0, -1), dims), [x])


def test_flip_copies_and_errors():
    k = K.from_numpy(np.arange(6.0).reshape(2, 3))
    f = K.flip(k, [])                    # a copy, not a view
    K.fill_(k, 7.0)
    np.testing.assert_array_equal(f.to_numpy(), np.arange(6.0).reshape(2, 3))
    with pytest.raises(K.KilnError) as e:
        K.flip(k, [0, -2])
    assert e.value.status == K.ERR_ARG and "more than once" in e.value.message
    with pytest.raises(K.KilnError):
        K.flip(k, [2])
    i = K.from_numpy(np.arange(6).reshape(2, 3))
    np.testing.assert_array_equal(K.flip(i, [1]).to_numpy(), np.arange(6).reshape(2, 3)[:, ::-1])


ROLL_CASES = [((6,), [2], []), ((2, 3), [1], []), ((2, 3), [-7], []), ((2, 3), [1, 5], [0, 1]),
              ((2, 3, 4), [3], [-1]), ((2, 3), [1, 1], [1, 1]), ((0, 3), [2], [1]),
              ((3, 4), [0], [0]), ((), [3], [])]


@pytest.mark.parametrize("shape,shifts,dims", ROLL_CASES, ids=str)
def test_roll(shape, shifts, dims):
    x = np.random.default_rng(2).standard_normal(shape)
    tdims = dims if dims else None
    check_fn(lambda t: K.roll(t, shifts, dims), lambda t: torch.roll(t, shifts, tdims), [x])
    if len(shape) >= 2:
        check_fn(lambda t: K.roll(K.t(t) if len(shape) == 2 else t, shifts, dims),
                 lambda t: torch.roll(t.t() if len(shape) == 2 else t, shifts, tdims), [x])


def test_roll_errors_and_copy():
    k = K.from_numpy(np.arange(6.0))
    r = K.roll(k, [6], [])                # nothing moves: still a copy
    K.fill_(k, 0.0)
    np.testing.assert_array_equal(r.to_numpy(), np.arange(6.0))
    with pytest.raises(K.KilnError) as e:
        K.roll(k, [1, 2], [0])
    assert e.value.status == K.ERR_ARG and "kiln_roll" in e.value.message
    with pytest.raises(K.KilnError):
        K.roll(k, [1, 2], [])


def test_outer():
    rng = np.random.default_rng(4)
    check_fn(K.outer, torch.outer, [rng.standard_normal(3), rng.standard_normal(5)])
    check_fn(K.outer, torch.outer, [rng.standard_normal(0), rng.standard_normal(2)])
    r = K.outer(K.from_numpy(np.array([1, 2])), K.from_numpy(np.array([1.5, 2.0], np.float32)))
    assert r.dtype == K.F32    # promoted as torch.outer
    np.testing.assert_array_equal(r.to_numpy(), torch.outer(torch.tensor([1, 2]), torch.tensor([1.5, 2.0])).numpy())
    with pytest.raises(K.KilnError) as e:
        K.outer(K.from_numpy(np.ones((2, 2))), K.from_numpy(np.ones(2)))
    assert e.value.status == K.ERR_SHAPE


@pytest.mark.parametrize("shapes", [((3, 4), (3, 4), (3, 4)), ((3, 4), (4,), (3, 1)), ((2, 3), (2, 3), ())],
                         ids=str)
def test_lerp(shapes):
    rng = np.random.default_rng(5)
    s, e = rng.standard_normal(shapes[0]), rng.standard_normal(shapes[1])
    w = rng.uniform(-0.5, 1.5, shapes[2])    # both branches of the formula
    check_fn(K.lerp, torch.lerp, [s, e, w])
    for ws in (0.0, 0.25, 0.5, 1.0, -0.75, 2.0):
        check_fn(lambda a, b: K.lerp_scalar(a, b, ws), lambda a, b: torch.lerp(a, b, ws), [s, e])


def test_lerp_dtypes():
    # exact at the ends (Torch's two-sided formula); elsewhere within
    # rounding (Torch's CPU kernel contracts to FMA, Kiln need not)
    s = np.array([1e8, -3.0, 0.1], np.float32)
    e = np.array([1.0, 7.0, 0.3], np.float32)
    for ws in (0.0, 1.0, 0.3, 0.7):
        got = K.lerp_scalar(K.from_numpy(s), K.from_numpy(e), ws).to_numpy()
        want = torch.lerp(torch.tensor(s), torch.tensor(e), ws).numpy()
        if ws in (0.0, 1.0):
            np.testing.assert_array_equal(got, want)
        np.testing.assert_allclose(got, want, rtol=2e-7, atol=2e-7 * np.abs(e - s).max())
    # F16 in F32, rounded once
    s16, e16 = np.array([2.0, -3.0, 0.1], np.float16), np.array([1.0, 7.0, 0.3], np.float16)
    h = K.lerp_scalar(K.from_numpy(s16), K.from_numpy(e16), 0.25)
    assert h.dtype == K.F16
    want = torch.lerp(torch.tensor(s16).float(), torch.tensor(e16).float(), 0.25)
    np.testing.assert_array_equal(h.to_numpy(), want.half().numpy())
    for bad in ((K.from_numpy(np.ones(2, np.int64)), K.from_numpy(np.ones(2, np.int64))),
                (K.from_numpy(np.ones(2, np.float32)), K.from_numpy(np.ones(2)))):
        with pytest.raises(K.KilnError) as e:
            K.lerp_scalar(bad[0], bad[1], 0.5)
        assert e.value.status == K.ERR_DTYPE


@pytest.mark.parametrize("idx,n", [([0, 2, 1], 3), ([[0, 3], [1, 1]], 5), ([4, 0], -1), ([], 3),
                                   (2, 4), ([[]], 2)], ids=str)
def test_one_hot(idx, n):
    a = np.array(idx, np.int64)
    r = K.one_hot(K.from_numpy(a), n)
    want = torch.nn.functional.one_hot(torch.tensor(a), n)
    assert r.dtype == K.I64 and r.shape == tuple(want.shape)
    np.testing.assert_array_equal(r.to_numpy(), want.numpy())
    r32 = K.one_hot(K.from_numpy(a.astype(np.int32)), n)
    np.testing.assert_array_equal(r32.to_numpy(), want.numpy())


@pytest.mark.parametrize("idx,n,status,words", [
    ([0, 3], 3, K.ERR_INDEX, "class value 3"), ([0, -1], 3, K.ERR_INDEX, "class value -1"),
    ([], -1, K.ERR_ARG, "empty"), ([1], -2, K.ERR_ARG, "num_classes -2")], ids=str)
def test_one_hot_errors(idx, n, status, words):
    with pytest.raises(K.KilnError) as e:
        K.one_hot(K.from_numpy(np.array(idx, np.int64)), n)
    assert e.value.status == status and words in e.value.message and "kiln_one_hot" in e.value.message
    with pytest.raises(K.KilnError) as e:
        K.one_hot(K.from_numpy(np.array([0.0, 1.0])), 2)
    assert e.value.status == K.ERR_DTYPE


# ------------------------------------------ rand_like, uniform_, normal_

@pytest.mark.parametrize("d", [K.F32, K.F64, K.F16, K.BF16], ids=lambda d: K.DTYPE_NAMES[d])
def test_rand_like_randn_like(d):
    t = K.transpose(K.zeros(d, [300, 200]), 0, 1)
    for fn, draw in ((K.rand_like, K.rand), (K.randn_like, K.randn)):
        K.manual_seed(5)
        a = fn(t)
        K.manual_seed(5)
        b = draw(d, [200, 300])        # the same generator, same order
        assert a.shape == (200, 300) and a.dtype == d and K.is_contiguous(a)
        np.testing.assert_array_equal(as_np(a), as_np(b))
    v = as_np(K.rand_like(t)).astype(np.float64)
    assert v.min() >= 0 and v.max() < 1 and abs(v.mean() - 0.5) < 5 * np.sqrt(1 / 12 / v.size)
    n = as_np(K.randn_like(t)).astype(np.float64)
    assert abs(n.mean()) < 5 / np.sqrt(n.size) and abs(n.std() - 1) < 0.02
    with pytest.raises(K.KilnError) as e:
        K.rand_like(K.zeros(K.I64, [2]))
    assert e.value.status == K.ERR_DTYPE and "kiln_rand_like" in e.value.message


@pytest.mark.parametrize("d", [K.F32, K.F64, K.F16], ids=lambda d: K.DTYPE_NAMES[d])
def test_uniform_normal_inplace(d):
    base = K.full(d, [400, 300], 7.0)
    view = K.narrow(K.transpose(base, 0, 1), 1, 100, 250)     # [300, 250], strided
    alias = K.narrow(base, 0, 100, 250)                        # the same elements
    K.manual_seed(9)
    assert K.lib.kiln_uniform_(view.handle, -2.0, 3.0) == K.OK
    K.manual_seed(9)
    want = K.add_scalar(K.mul_scalar(K.rand(d, [300, 250]), 5.0), -2.0).to_numpy()
    got = view.to_numpy()
    np.testing.assert_array_equal(got, want)     # seeded, row-major over the view
    np.testing.assert_array_equal(K.t(alias).to_numpy(), got)  # seen through another view
    b = base.to_numpy()
    assert (b[:100] == 7).all() and (b[350:] == 7).all()       # outside untouched
    g = got.astype(np.float64)
    assert g.min() >= -2 and g.max() <= 3 and abs(g.mean() - 0.5) < 5 * np.sqrt(25 / 12 / g.size)
    assert K.lib.kiln_normal_(view.handle, 10.0, 0.5) == K.OK
    g = view.to_numpy().astype(np.float64)
    assert abs(g.mean() - 10) < 5 * 0.5 / np.sqrt(g.size) and abs(g.std() - 0.5) < 0.01
    assert (base.to_numpy()[:100] == 7).all()


def test_uniform_normal_errors():
    t, i, e = K.zeros(K.F32, [3]), K.zeros(K.I32, [3]), K.expand(K.zeros(K.F32, [1]), [4])
    for call, args, status, words in [
            (K.lib.kiln_uniform_, (t.handle, 2.0, 1.0), K.ERR_ARG, "from 2"),
            (K.lib.kiln_uniform_, (t.handle, 0.0, float("inf")), K.ERR_ARG, "to inf"),
            (K.lib.kiln_normal_, (t.handle, 0.0, -1.0), K.ERR_ARG, "std -1"),
            (K.lib.kiln_normal_, (i.handle, 0.0, 1.0), K.ERR_DTYPE, "i32"),
            (K.lib.kiln_uniform_, (e.handle, 0.0, 1.0), K.ERR_ARG, ""),
            (K.lib.kiln_normal_, (None, 0.0, 1.0), K.ERR_ARG, "")]:
        K.clear_error()
        assert call(*args) == status
        assert words in K.last_error(), K.last_error()
        K.clear_error()
    np.testing.assert_array_equal(t.to_numpy(), np.zeros(3, np.float32))


# ---------------------------------------------------------------- einsum

EINSUM_CASES = [
    ("ij,jk->ik", [(3, 4), (4, 5)]), ("ij,jk", [(3, 4), (4, 5)]), ("ii->i", [(3, 3)]),
    ("ii", [(3, 3)]), ("iij->j", [(3, 3, 2)]), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("...ij,jk->ik", [(2, 3, 4), (4, 5)]), ("...ij,jk", [(2, 3, 4), (4, 5)]),
    ("i,j->ij", [(3,), (4,)]), ("i,i", [(3,), (3,)]), ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
    ("ijk->kji", [(2, 3, 4)]), ("ij->", [(2, 3)]), ("Bij,jk", [(2, 3, 4), (4, 5)]),
    ("ij,ij->ij", [(2, 1), (2, 4)]), ("ij,jk->ik", [(2, 1), (3, 4)]),
    ("...,...->...", [(2, 1, 3), (4, 1)]), (" a b , b c -> c a", [(2, 3), (3, 4)]),
    ("bhqd,bhkd->bhqk", [(2, 2, 3, 4), (2, 2, 5, 4)]), ("ijkl,jl->ik", [(2, 3, 4, 5), (3, 5)]),
    ("i,i,i->", [(4,), (4,), (4,)]), ("ij,kl->ijkl", [(2, 3), (1, 2)]), ("ij,jk->ik", [(0, 3), (3, 2)]),
    ("ij,jk->ik", [(2, 0), (0, 3)]), ("ik,kj,ji->", [(2, 3), (3, 4), (4, 2)]),
]


@pytest.mark.parametrize("eq,shapes", EINSUM_CASES, ids=[c[0] for c in EINSUM_CASES])
def test_einsum(eq, shapes):
    rng = np.random.default_rng(len(eq))
    xs = [rng.standard_normal(s) for s in shapes]
    check_fn(lambda *ks: K.einsum(eq, list(ks)), lambda *ts: torch.einsum(eq, *ts), xs, rtol=1e-10)


def test_einsum_dtypes_and_layouts():
    a = np.arange(12).reshape(3, 4)
    b = np.arange(20).reshape(4, 5) - 7
    r = K.einsum("ij,jk->ik", [K.from_numpy(a), K.from_numpy(b)])
    assert r.dtype == K.I64
    np.testing.assert_array_equal(r.to_numpy(), a @ b)
    f = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    kt = K.t(K.from_numpy(f))                       # a transposed view
    got = K.einsum("ij,jk->ik", [kt, K.from_numpy(f)]).to_numpy()
    np.testing.assert_allclose(got, f.T @ f, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("eq,shapes,status,words", [
    ("ij,jk->ik", [(2, 3)], K.ERR_ARG, "more terms"),
    ("ij", [(2, 3), (3,)], K.ERR_ARG, "1 terms for 2 operands"),
    ("i1", [(2, 3)], K.ERR_ARG, "invalid subscript '1'"),
    ("ij->k", [(2, 3)], K.ERR_ARG, "output subscript k does not appear"),
    ("ij->ii", [(2, 3)], K.ERR_ARG, "output subscript i appears twice"),
    ("ijk->ij", [(2, 3)], K.ERR_SHAPE, "operand 0 has 2 dims but its subscripts name 3"),
    ("ii->i", [(2, 3)], K.ERR_SHAPE, "subscript i is repeated in operand 0 with sizes 2 and 3"),
    ("ij,jk->ik", [(2, 3), (4, 5)], K.ERR_SHAPE, "subscript j has size 4 in operand 1 but 3"),
    ("i..j", [(2, 3)], K.ERR_ARG, "\"...\""),
    ("...i...", [(2, 3)], K.ERR_ARG, "\"...\""),
], ids=str)
def test_einsum_errors(eq, shapes, status, words):
    ks = [K.from_numpy(np.zeros(s)) for s in shapes]
    with pytest.raises(K.KilnError) as e:
        K.einsum(eq, ks)
    assert e.value.status == status and words in e.value.message and "kiln_einsum" in e.value.message, \
        e.value.message


@pytest.mark.parametrize("name", list(TRIG))
def test_inverse_trig_inplace(name):
    """kiln_<name>_ on a strided view writes f of the old values there and
    nowhere else, as Torch's <name>_ on the same view."""
    x = TRIG[name][1](np.random.default_rng(3), 24).reshape(4, 6)
    k, t = K.from_numpy(x), torch.tensor(x)
    kv, tv = K.slice(K.t(k), 0, 1, 6, 2), t.t()[1:6:2]
    assert getattr(K.lib, f"kiln_{name}_")(kv.handle) == K.OK
    getattr(tv, f"{name}_")()
    _close(k.to_numpy(), t.numpy(), what=f"{name}_")
    ints = K.zeros(K.I64, [2])
    assert getattr(K.lib, f"kiln_{name}_")(ints.handle) == K.ERR_DTYPE
    K.clear_error()
