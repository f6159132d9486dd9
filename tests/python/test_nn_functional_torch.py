"""torch.nn.functional ops (nn/functional.c, nn/loss.c) against
PyTorch 1.13: values and gradients (kiln_grad against autograd, with a
random cotangent) on random shapes, F32 and F64, contiguous and
transposed inputs; the errors Torch raises; dropout's statistics (Kiln's
generator is not Torch's: reproducibility under kiln_manual_seed, the
kept fraction, the exact 1 / (1 - p) scale). Skips with torch absent.
"""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import examples, import_torch  # noqa: E402

torch = import_torch("nn.functional")
import torch.nn.functional as F  # noqa: E402

import kiln_ctypes as K  # noqa: E402

torch.set_num_threads(1)

FLOATS = st.sampled_from([K.F32, K.F64])
NP = {K.F32: np.float32, K.F64: np.float64}
TOL = {K.F32: dict(rtol=2e-5, atol=2e-6), K.F64: dict(rtol=1e-11, atol=1e-12)}
RED = {"none": K.REDUCTION_NONE, "mean": K.REDUCTION_MEAN,
       "sum": K.REDUCTION_SUM}


def pair(x, transposed=False):
    """x as a Kiln tensor and a Torch leaf (requires_grad); transposed:
    both read through the transpose of their last two dims (x given in
    the source layout)."""
    k, t = K.from_numpy(x), torch.from_numpy(x.copy()).requires_grad_(True)
    kv, tv = k, t
    if transposed and x.ndim >= 2:
        kv, tv = K.transpose(k, -1, -2), t.transpose(-1, -2)
    return k, t, kv, tv


def check(kout, tout, kins, tins, d, what):
    """Values equal; kiln_grad of sum(out * c) equals Torch's grads."""
    want = tout.detach().numpy()
    got = kout.to_numpy()
    assert got.shape == want.shape, what
    np.testing.assert_allclose(got, want, err_msg=what, **TOL[d])
    if not kins:
        return
    c = np.random.default_rng(7).uniform(-1, 1, want.shape).astype(NP[d])
    kg = K.grad(kout, kins, [K.from_numpy(c)])
    tg = torch.autograd.grad(tout, tins, torch.from_numpy(c),
                             allow_unused=True)
    for j, (a, b) in enumerate(zip(kg, tg)):
        b = np.zeros(kins[j].shape, NP[d]) if b is None else b.numpy()
        np.testing.assert_allclose(a.to_numpy(), b,
                                   err_msg=f"{what}: grad {j}", **TOL[d])


SHAPES = st.lists(st.integers(1, 5), min_size=2, max_size=4)


ACTS = {
    "leaky_relu": (lambda k, a: K.leaky_relu(k, a),
                   lambda t, a: F.leaky_relu(t, a)),
    "elu": (lambda k, a: K.elu(k, a), lambda t, a: F.elu(t, a)),
    "selu": (lambda k, a: K.selu(k), lambda t, a: F.selu(t)),
    "softplus": (lambda k, a: K.softplus(k, a, 1.5),
                 lambda t, a: F.softplus(t, a, 1.5)),
    "softsign": (lambda k, a: K.softsign(k), lambda t, a: F.softsign(t)),
}


@examples(80)
@given(d=FLOATS, shape=SHAPES, op=st.sampled_from(sorted(ACTS)),
       param=st.sampled_from([0.01, 0.5, 1.0, 2.0]),
       transposed=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_activations(d, shape, op, param, transposed, seed):
    x = (np.random.default_rng(seed).standard_normal(shape) * 3).astype(NP[d])
    x[np.abs(x) < 1e-3] = 0.5  # away from the kink (the gradient there is tested in C)
    k, t, kv, tv = pair(x, transposed)
    kf, tf = ACTS[op]
    check(kf(kv, param), tf(tv, param), [k], [t], d, f"{op}({shape}, {param})")


@examples(40)
@given(d=FLOATS, shape=st.lists(st.integers(1, 4), min_size=1, max_size=4),
       per_channel=st.booleans(), transposed=st.booleans(),
       seed=st.integers(0, 2**32 - 1))
def test_prelu(d, shape, per_channel, transposed, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(NP[d])
    k, t, kv, tv = pair(x, transposed)
    channels = tuple(tv.shape)[1] if len(shape) >= 2 else 1
    w = rng.uniform(-1, 1, [channels if per_channel else 1]).astype(NP[d])
    kw, tw, _, _ = pair(w)
    check(K.prelu(kv, kw), F.prelu(tv, tw), [k, kw], [t, tw], d, f"prelu({shape})")


def test_prelu_scalars():
    for x, w in (([-1.0, 2.0], 0.25), (-2.0, [0.25]), (-3.0, 0.5)):
        xn, wn = np.array(x, np.float64), np.array(w, np.float64)
        k, t, _, _ = pair(xn)
        kw, tw, _, _ = pair(wn)
        check(K.prelu(k, kw), F.prelu(t, tw), [k, kw], [t, tw], K.F64, f"prelu({x}, {w})")


@examples(40)
@given(d=FLOATS, shape=SHAPES, transposed=st.booleans(), data=st.data(),
       seed=st.integers(0, 2**32 - 1))
def test_glu(d, shape, transposed, data, seed):
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    view_shape = list(shape)
    view_shape[dim] *= 2
    src = list(view_shape)
    if transposed:  # the source of a transposed view of view_shape
        src[-1], src[-2] = src[-2], src[-1]
    x = np.random.default_rng(seed).standard_normal(src).astype(NP[d])
    k, t, kv, tv = pair(x, transposed)
    check(K.glu(kv, dim), F.glu(tv, dim), [k], [t], d, f"glu({view_shape}, {dim})")


@examples(40)
@given(d=FLOATS, lead=st.lists(st.integers(1, 3), max_size=2),
       c=st.integers(1, 3), r=st.integers(1, 3), h=st.integers(1, 4),
       w=st.integers(1, 4), transposed=st.booleans(),
       seed=st.integers(0, 2**32 - 1))
def test_pixel_shuffle(d, lead, c, r, h, w, transposed, seed):
    src = lead + [c * r * r] + ([w, h] if transposed else [h, w])
    x = np.random.default_rng(seed).standard_normal(src).astype(NP[d])
    k, t, kv, tv = pair(x, transposed)
    check(K.pixel_shuffle(kv, r), F.pixel_shuffle(tv, r), [k], [t], d,
          f"pixel_shuffle({src}, {r})")


@examples(40)
@given(d=FLOATS, v=st.integers(1, 8), dim=st.integers(1, 5),
       ishape=st.lists(st.integers(0, 4), max_size=3),
       idt=st.sampled_from([K.I64, K.I32]), transposed=st.booleans(),
       seed=st.integers(0, 2**32 - 1))
def test_embedding(d, v, dim, ishape, idt, transposed, seed):
    rng = np.random.default_rng(seed)
    wsrc = rng.standard_normal([dim, v] if transposed else [v, dim]).astype(NP[d])
    k, t, kv, tv = pair(wsrc, transposed)
    idx = rng.integers(0, v, ishape).astype(K.NP_DTYPE[idt])
    ki = K.from_numpy(idx)
    if len(ishape) >= 2:
        ki = K.transpose(K.from_numpy(np.ascontiguousarray(np.swapaxes(idx, -1, -2))), -1, -2)
    out = K.embedding(kv, ki)
    check(out, F.embedding(torch.from_numpy(idx.astype(np.int64)), tv), [k], [t], d,
          f"embedding([{v}, {dim}], {ishape})")


@examples(40)
@given(d=FLOATS, lead=st.lists(st.integers(1, 4), max_size=3),
       nin=st.integers(1, 6), nout=st.integers(1, 6), bias=st.booleans(),
       transposed=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_linear(d, lead, nin, nout, bias, transposed, seed):
    rng = np.random.default_rng(seed)
    if transposed and lead:  # input read as a transpose of its last two dims
        x = rng.standard_normal(lead[:-1] + [nin, lead[-1]]).astype(NP[d])
    else:
        x = rng.standard_normal(lead + [nin]).astype(NP[d])
    k, t, kv, tv = pair(x, transposed and bool(lead))
    wsrc = rng.standard_normal([nin, nout] if transposed else [nout, nin]).astype(NP[d])
    kw, tw, kwv, twv = pair(wsrc, transposed)
    ins_k, ins_t = [k, kw], [t, tw]
    kb = tb = None
    if bias:
        kb, tb, _, _ = pair(rng.standard_normal([nout]).astype(NP[d]))
        ins_k.append(kb)
        ins_t.append(tb)
    check(K.linear(kv, kwv, kb), F.linear(tv, twv, tb), ins_k, ins_t, d,
          f"linear({lead}, {nin}->{nout}, bias={bias})")


LOSS_SHAPES = st.sampled_from(["unbatched", "batched", "spatial"])


def loss_inputs(rng, d, kind, n, c, spatial):
    if kind == "unbatched":
        xs, ts = [c], []
    elif kind == "batched":
        xs, ts = [n, c], [n]
    else:
        xs, ts = [n, c] + spatial, [n] + spatial
    x = (rng.standard_normal(xs) * 2).astype(NP[d])
    tgt = rng.integers(0, c, ts).astype(np.int64)
    return x, tgt


@examples(60)
@given(d=FLOATS, kind=LOSS_SHAPES, n=st.integers(1, 5), c=st.integers(1, 6),
       spatial=st.lists(st.integers(1, 3), min_size=1, max_size=2),
       reduction=st.sampled_from(sorted(RED)),
       smoothing=st.sampled_from([0.0, 0.1, 0.5, 1.0]),
       transposed=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_cross_entropy(d, kind, n, c, spatial, reduction, smoothing,
                       transposed, seed):
    rng = np.random.default_rng(seed)
    x, tgt = loss_inputs(rng, d, kind, n, c, spatial)
    # non-contiguous logits: the transpose (dims 0 and -1) of a source
    src = np.ascontiguousarray(np.swapaxes(x, 0, -1)) if transposed else x
    k, t = K.from_numpy(src), torch.from_numpy(src.copy()).requires_grad_(True)
    kv, tv = (K.transpose(k, 0, -1), t.transpose(0, -1)) if transposed else (k, t)
    # a strided target: every other element of a [..., 2] array
    kt = K.select(K.from_numpy(np.stack([tgt, np.zeros_like(tgt)], -1)), -1, 0)
    tt = torch.from_numpy(tgt)
    check(K.cross_entropy(kv, kt, RED[reduction], smoothing),
          F.cross_entropy(tv, tt, reduction=reduction, label_smoothing=smoothing),
          [k], [t], d, f"cross_entropy({x.shape}, {reduction}, {smoothing})")
    lp = x - x.max(axis=0 if x.ndim == 1 else 1, keepdims=True)
    kl, tl = K.from_numpy(lp), torch.from_numpy(lp.copy()).requires_grad_(True)
    check(K.nll_loss(kl, kt, RED[reduction]), F.nll_loss(tl, tt, reduction=reduction),
          [kl], [tl], d, f"nll_loss({x.shape}, {reduction})")


@examples(40)
@given(d=FLOATS, shape=st.lists(st.integers(1, 5), max_size=4),
       reduction=st.sampled_from(sorted(RED)), transposed=st.booleans(),
       seed=st.integers(0, 2**32 - 1))
def test_mse_loss(d, shape, reduction, transposed, seed):
    rng = np.random.default_rng(seed)
    k, t, kv, tv = pair(rng.standard_normal(shape).astype(NP[d]), transposed)
    k2, t2, kv2, tv2 = pair(rng.standard_normal(shape).astype(NP[d]), transposed)
    check(K.mse_loss(kv, kv2, RED[reduction]), F.mse_loss(tv, tv2, reduction=reduction),
          [k, k2], [t, t2], d, f"mse_loss({shape}, {reduction})")


def half_values(k):
    """A F16/BF16 Kiln tensor's values as float32."""
    v = k.to_numpy()
    return K.bf16_bits_to_f32(v) if k.dtype == K.BF16 else v.astype(np.float32)


HALF_OPS = {
    "leaky_relu": (lambda k: K.leaky_relu(k, 0.1), lambda t: F.leaky_relu(t, 0.1)),
    "elu": (lambda k: K.elu(k, 1.0), lambda t: F.elu(t, 1.0)),
    "selu": (K.selu, F.selu),
    "softplus": (lambda k: K.softplus(k, 1.0, 20.0), lambda t: F.softplus(t, 1.0, 20.0)),
    "softsign": (K.softsign, F.softsign),
    "glu": (lambda k: K.glu(k, -1), lambda t: F.glu(t, -1)),
    "cross_entropy": (
        lambda k: K.cross_entropy(k, K.from_numpy(np.arange(k.shape[0]) % k.shape[1]),
                                  K.REDUCTION_NONE, 0.1),
        lambda t: F.cross_entropy(t, torch.arange(t.shape[0]) % t.shape[1],
                                  reduction="none", label_smoothing=0.1)),
}


@pytest.mark.parametrize("d", [K.F16, K.BF16])
@pytest.mark.parametrize("op", sorted(HALF_OPS))
def test_half_dtypes_compute_in_f32(d, op):
    """F16/BF16 inputs: Torch's F32 result on the same (rounded) values,
    rounded once to the dtype (within one rounding)."""
    x = (np.random.default_rng(3).standard_normal((6, 8)) * 3).astype(np.float32)
    k = K.to_dtype(K.from_numpy(x), d)
    xr = half_values(k)
    kf, tf = HALF_OPS[op]
    got = kf(k)
    assert got.dtype == d
    want = tf(torch.from_numpy(xr)).numpy()
    ulp = 2.0 ** -10 if d == K.F16 else 2.0 ** -7
    np.testing.assert_allclose(half_values(got), want, rtol=ulp, atol=1e-4, err_msg=op)


@pytest.mark.parametrize("d", [K.F16, K.BF16])
def test_half_linear(d):
    """F16/BF16 linear: an F32 GEMM and bias, rounded once to the dtype
    (within one ulp of the exact product of the rounded inputs)."""
    rng = np.random.default_rng(4)
    ks = [K.to_dtype(K.from_numpy(rng.standard_normal(s).astype(np.float32)), d)
          for s in ((3, 5, 16), (7, 16), (7,))]
    got = K.linear(*ks)
    assert got.dtype == d and got.shape == (3, 5, 7)
    x, w, b = (torch.from_numpy(half_values(k)) for k in ks)
    want = F.linear(x.double(), w.double(), b.double()).float().numpy()
    ulp = 2.0 ** -10 if d == K.F16 else 2.0 ** -7
    np.testing.assert_allclose(half_values(got), want, rtol=ulp, atol=1e-3)


# ------------------------------------------------------------- errors


def both_raise(kcall, tcall, status):
    with pytest.raises(Exception):
        tcall()
    with pytest.raises(K.KilnError) as e:
        kcall()
    assert e.value.status == status
    assert e.value.message.startswith(e.value.function + ":")


def test_errors_match_torch():
    x = np.zeros((3, 4), np.float32)
    k, t = K.from_numpy(x), torch.from_numpy(x)
    tgt = np.array([0, 5, 1])
    both_raise(lambda: K.cross_entropy(k, K.from_numpy(tgt), K.REDUCTION_MEAN, 0),
               lambda: F.cross_entropy(t, torch.from_numpy(tgt)), K.ERR_INDEX)
    both_raise(lambda: K.nll_loss(k, K.from_numpy(-tgt), K.REDUCTION_SUM),
               lambda: F.nll_loss(t, torch.from_numpy(-tgt), reduction="sum"), K.ERR_INDEX)
    t32 = np.array([0, 1, 1], np.int32)
    both_raise(lambda: K.cross_entropy(k, K.from_numpy(t32), K.REDUCTION_MEAN, 0),
               lambda: F.cross_entropy(t, torch.from_numpy(t32)), K.ERR_DTYPE)
    both_raise(lambda: K.cross_entropy(k, K.from_numpy(np.zeros(2, np.int64)), K.REDUCTION_MEAN, 0),
               lambda: F.cross_entropy(t, torch.zeros(2, dtype=torch.long)), K.ERR_SHAPE)
    both_raise(lambda: K.cross_entropy(k, K.from_numpy(np.zeros(3, np.int64)), K.REDUCTION_MEAN, 1.5),
               lambda: F.cross_entropy(t, torch.zeros(3, dtype=torch.long), label_smoothing=1.5),
               K.ERR_ARG)
    w = np.zeros((5, 2), np.float32)
    both_raise(lambda: K.embedding(K.from_numpy(w), K.from_numpy(np.array([0, 5]))),
               lambda: F.embedding(torch.tensor([0, 5]), torch.from_numpy(w)), K.ERR_INDEX)
    both_raise(lambda: K.embedding(K.from_numpy(w), K.from_numpy(np.array([-1]))),
               lambda: F.embedding(torch.tensor([-1]), torch.from_numpy(w)), K.ERR_INDEX)
    both_raise(lambda: K.embedding(K.from_numpy(w), K.from_numpy(np.array([0.0]))),
               lambda: F.embedding(torch.tensor([0.0]), torch.from_numpy(w)), K.ERR_DTYPE)
    both_raise(lambda: K.linear(k, K.from_numpy(w), None),
               lambda: F.linear(t, torch.from_numpy(w)), K.ERR_SHAPE)
    both_raise(lambda: K.linear(k, K.from_numpy(np.zeros((2, 4))), None),
               lambda: F.linear(t, torch.zeros(2, 4, dtype=torch.float64)), K.ERR_DTYPE)
    both_raise(lambda: K.glu(k, 0), lambda: F.glu(t, 0), K.ERR_SHAPE)
    both_raise(lambda: K.glu(k, 2), lambda: F.glu(t, 2), K.ERR_ARG)
    both_raise(lambda: K.pixel_shuffle(k, 2), lambda: F.pixel_shuffle(t, 2), K.ERR_SHAPE)
    img = np.zeros((1, 6, 2, 2), np.float32)
    both_raise(lambda: K.pixel_shuffle(K.from_numpy(img), 2),
               lambda: F.pixel_shuffle(torch.from_numpy(img), 2), K.ERR_SHAPE)
    both_raise(lambda: K.prelu(k, K.from_numpy(np.zeros(3, np.float32))),
               lambda: F.prelu(t, torch.zeros(3)), K.ERR_SHAPE)
    both_raise(lambda: K.prelu(k, K.from_numpy(np.zeros(4))),
               lambda: F.prelu(t, torch.zeros(4, dtype=torch.float64)), K.ERR_DTYPE)
    both_raise(lambda: K.leaky_relu(K.from_numpy(np.zeros(3, np.int64)), 0.1),
               lambda: F.leaky_relu(torch.zeros(3, dtype=torch.long), 0.1), K.ERR_DTYPE)
    for p in (1.5, -0.1):
        both_raise(lambda: K.dropout(k, p, True), lambda: F.dropout(t, p), K.ERR_ARG)
    # the target of a failed call stays usable
    kt = K.from_numpy(tgt)
    with pytest.raises(K.KilnError):
        K.cross_entropy(k, kt, K.REDUCTION_MEAN, 0)
    assert (kt.to_numpy() == tgt).all()


# ------------------------------------------------------------ dropout


@examples(10)
@given(d=FLOATS, p=st.sampled_from([0.1, 0.3, 0.5, 0.8]),
       seed=st.integers(0, 2**32 - 1))
def test_dropout(d, p, seed):
    n = 20000
    x = (np.random.default_rng(seed).uniform(0.5, 2, n)).astype(NP[d])
    k = K.from_numpy(x)
    K.manual_seed(seed)
    a = K.dropout(k, p, True).to_numpy()
    K.manual_seed(seed)
    b = K.dropout(k, p, True).to_numpy()
    assert (a == b).all()  # reproducible
    kept = a != 0
    sd = np.sqrt(n * p * (1 - p))
    assert abs(kept.sum() - n * (1 - p)) < 6 * sd
    # Torch's scale: input * (bernoulli(1 - p) / (1 - p)) in the dtype
    scale = NP[d](1) / NP[d](1 - p)
    assert (a[kept] == x[kept] * scale).all()
    assert (a[~kept] == 0).all()
    want = F.dropout(torch.from_numpy(x), p, True).numpy()  # the same scale
    assert (want[want != 0] == x[want != 0] * scale).all()
    # gradient: the mask times the scale
    c = np.random.default_rng(1).uniform(-1, 1, n).astype(NP[d])
    K.manual_seed(seed)
    g = K.grad(K.dropout(k, p, True), [k], [K.from_numpy(c)])[0].to_numpy()
    np.testing.assert_array_equal(g, np.where(kept, c * scale, 0))


def test_dropout_identity_and_p1():
    x = np.array([1.0, -2.0, np.inf, np.nan], np.float32)
    k = K.from_numpy(x)
    assert K.dropout(k, 0.5, False).handle == k.handle
    assert K.dropout(k, 0.0, True).handle == k.handle
    want = F.dropout(torch.from_numpy(x), 1.0, True).numpy()
    np.testing.assert_array_equal(K.dropout(k, 1.0, True).to_numpy(), want)
