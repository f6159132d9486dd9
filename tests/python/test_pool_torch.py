"""Padding, pooling and batch norm against PyTorch 1.13's
torch.nn.functional: kiln_pad (constant, reflect, replicate, circular),
kiln_max_pool and kiln_avg_pool (1-D, 2-D, 3-D; stride, padding,
dilation, ceil_mode, count_include_pad) and kiln_batch_norm (training
with the running-stat updates, eval) — values, gradients (a random
cotangent through kiln_grad and torch's backward) and the errors Torch
raises, on random shapes in F32 and F64, contiguous or read through a
transposed / strided view. Max pooling inputs often hold ties (small
integers): the gradient must reach the element Torch picks.
Skips with torch absent (Debian python3-torch).
"""
import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from conftest import examples, import_torch  # noqa: E402

torch = import_torch("pooling")
import torch.nn.functional as F  # noqa: E402

import kiln_ctypes as K  # noqa: E402

torch.set_num_threads(1)

TORCH = {K.F32: torch.float32, K.F64: torch.float64}
NP = {K.F32: np.float32, K.F64: np.float64}
TOL = {K.F32: 2e-5, K.F64: 1e-11}
FLOATS = st.sampled_from([K.F32, K.F64])
MODES = {K.PAD_CONSTANT: "constant", K.PAD_REFLECT: "reflect",
         K.PAD_REPLICATE: "replicate", K.PAD_CIRCULAR: "circular"}


def pair(x, d, layout):
    """x (NumPy) as a Kiln and a Torch tensor of dtype d, both read
    through the same view: "contiguous", "transposed" (x is stored with its
    last two dims swapped) or "strided" (every other element of the last
    dim of a twice wider buffer)."""
    x = x.astype(NP[d])
    if layout == "transposed" and x.ndim >= 2:
        base = np.ascontiguousarray(np.swapaxes(x, -1, -2))
        k = K.transpose(K.from_numpy(base, d), -1, -2)
        t = torch.from_numpy(base.copy()).transpose(-1, -2)
    elif layout == "strided":
        base = np.repeat(x, 2, axis=-1)
        k = K.slice(K.from_numpy(base, d), -1, 0, base.shape[-1], 2)
        t = torch.from_numpy(base.copy())[..., ::2]
    else:
        k, t = K.from_numpy(x, d), torch.from_numpy(x.copy())
    return k, t.requires_grad_(True)


def close(got, want, d, what):
    want = want.detach().numpy()
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    np.testing.assert_allclose(got, want, rtol=TOL[d], atol=TOL[d], err_msg=what)


def check(kf, tf, k, t, d, rng, what, wrt=(), grads=True):
    """kf(k) against tf(t): values, and (grads) the gradients w.r.t. k
    (and the extra (kiln, torch) pairs in wrt) for a random cotangent.
    When Torch raises, Kiln must raise too."""
    try:
        want = tf(t)
    except (RuntimeError, ValueError, NotImplementedError, IndexError):
        with pytest.raises(K.KilnError):
            kf(k)
        K.clear_error()
        return False
    got = kf(k)
    close(got.to_numpy(), want, d, what)
    if want.numel() == 0 or not grads:
        return True
    ct = rng.standard_normal(tuple(want.shape)).astype(NP[d])
    ks = [k] + [a for a, _ in wrt]
    ts = [t] + [b for _, b in wrt]
    gs = K.grad([got], ks, [K.from_numpy(ct, d)])
    tg = torch.autograd.grad(want, ts, torch.from_numpy(ct), allow_unused=True)
    for i, (g, w) in enumerate(zip(gs, tg)):
        if w is None:
            w = torch.zeros(ts[i].shape, dtype=ts[i].dtype)
        close(g.to_numpy(), w, d, f"{what}: gradient {i}")
    return True


LAYOUTS = st.sampled_from(["contiguous", "transposed", "strided"])


@st.composite
def pool_args(draw, with_dilation):
    nd = draw(st.integers(1, 3))
    hi = {1: 10, 2: 7, 3: 5}[nd]
    spatial = [draw(st.integers(1, hi)) for _ in range(nd)]
    lead = [draw(st.integers(1, 3)), draw(st.integers(1, 3))]
    if draw(st.booleans()):
        lead = lead[1:]  # no batch dim
    kernel = [draw(st.integers(1, 4)) for _ in range(nd)]
    stride = None if draw(st.booleans()) else [draw(st.integers(1, 3)) for _ in range(nd)]
    padding = [draw(st.integers(0, k // 2 + (1 if draw(st.integers(0, 9)) == 0 else 0)))
               for k in kernel]  # sometimes one too many: Torch's error
    dilation = [draw(st.integers(1, 2)) if with_dilation else 1 for _ in range(nd)]
    return nd, lead + spatial, kernel, stride, padding, dilation, draw(st.booleans())


def empty_window(shape, kernel, stride, padding, dilation, ceil):
    """Some window holds padding only (possible with dilation): Torch
    1.13 returns -inf there and its backward writes out of bounds (heap
    corruption), so only the values are compared."""
    nd = len(kernel)
    for i in range(nd):
        n, k, p, dl = shape[-nd + i], kernel[i], padding[i], dilation[i]
        s = stride[i] if stride else k
        num = n + 2 * p - dl * (k - 1) - 1 + (s - 1 if ceil else 0)
        o = (num // s) + 1
        if ceil and (o - 1) * s >= n + p:
            o -= 1
        for j in range(max(o, 0)):
            if not any(0 <= j * s - p + q * dl < n for q in range(k)):
                return True
    return False


@examples(120)
@given(args=pool_args(True), d=FLOATS, layout=LAYOUTS, ties=st.booleans(),
       seed=st.integers(0, 2**32 - 1))
def test_max_pool(args, d, layout, ties, seed):
    nd, shape, kernel, stride, padding, dilation, ceil = args
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 3, shape).astype(np.float64) if ties else rng.standard_normal(shape)
    k, t = pair(x, d, layout)
    tf = [None, F.max_pool1d, F.max_pool2d, F.max_pool3d][nd]
    check(lambda a: K.max_pool(a, kernel, stride, padding, dilation, ceil),
          lambda a: tf(a, kernel, stride if stride else kernel, padding, dilation, ceil_mode=ceil),
          k, t, d, rng, f"max_pool{nd}d {shape} k{kernel} s{stride} p{padding} d{dilation} ceil {ceil}",
          grads=not empty_window(shape, kernel, stride, padding, dilation, ceil))


@examples(120)
@given(args=pool_args(False), d=FLOATS, layout=LAYOUTS, include=st.booleans(),
       seed=st.integers(0, 2**32 - 1))
def test_avg_pool(args, d, layout, include, seed):
    nd, shape, kernel, stride, padding, _, ceil = args
    rng = np.random.default_rng(seed)
    k, t = pair(rng.standard_normal(shape), d, layout)
    tf = [None, F.avg_pool1d, F.avg_pool2d, F.avg_pool3d][nd]
    check(lambda a: K.avg_pool(a, kernel, stride, padding, ceil, include),
          lambda a: tf(a, kernel, stride if stride else kernel, padding, ceil, include),
          k, t, d, rng, f"avg_pool{nd}d {shape} k{kernel} s{stride} p{padding} ceil {ceil} include {include}")


def circular_ok(shape, pad):
    """Pads Torch 1.13's _pad_circular computes correctly: what a pad wraps
    fits in the cropped core (else Torch copies from memory it has not
    written yet, or from an empty core)."""
    for i in range(len(pad) // 2):
        n, lo, hi = shape[-1 - i], pad[2 * i], pad[2 * i + 1]
        core = n - max(-lo, 0) - max(-hi, 0)
        if n + lo + hi > 0 and (max(lo, 0) > core or max(hi, 0) > core or core <= 0):
            return False
    return True


@examples(150)
@given(mode=st.sampled_from(sorted(MODES)), nd=st.integers(1, 3), extra=st.integers(1, 2),
       data=st.data(), d=FLOATS, layout=LAYOUTS, seed=st.integers(0, 2**32 - 1))
def test_pad(mode, nd, extra, data, d, layout, seed):
    rng = np.random.default_rng(seed)
    shape = [data.draw(st.integers(1, 3)) for _ in range(extra)] + \
            [data.draw(st.integers(1, 6)) for _ in range(nd)]
    if mode == K.PAD_CONSTANT:  # any number of pads up to the rank
        nd = data.draw(st.integers(0, len(shape)))
    pad = [data.draw(st.integers(-3, 5)) for _ in range(2 * nd)]
    if mode == K.PAD_CIRCULAR:
        assume(circular_ok(shape, pad))
    value = data.draw(st.sampled_from([0.0, 1.5, -2.0])) if mode == K.PAD_CONSTANT else 0.0
    k, t = pair(rng.standard_normal(shape), d, layout)
    check(lambda a: K.pad(a, pad, mode, value),
          lambda a: F.pad(a, pad, mode=MODES[mode], value=value if mode == K.PAD_CONSTANT else None),
          k, t, d, rng, f"pad {MODES[mode]} {shape} {pad}")


@examples(80)
@given(d=FLOATS, training=st.booleans(), extra=st.integers(0, 2), stats=st.booleans(),
       affine=st.booleans(), momentum=st.sampled_from([0.1, 0.5, 1.0]), layout=LAYOUTS,
       data=st.data(), seed=st.integers(0, 2**32 - 1))
def test_batch_norm(d, training, extra, stats, affine, momentum, layout, data, seed):
    rng = np.random.default_rng(seed)
    shape = [data.draw(st.integers(1, 4)), data.draw(st.integers(1, 4))] + \
            [data.draw(st.integers(1, 4)) for _ in range(extra)]
    c = shape[1]
    stats = stats or not training
    k, t = pair(rng.standard_normal(shape) * 3 + 1, d, layout)
    rm0, rv0 = rng.standard_normal(c), rng.uniform(0.5, 2, c)
    krm, krv = (K.from_numpy(rm0, d), K.from_numpy(rv0, d)) if stats else (None, None)
    trm, trv = (torch.tensor(rm0, dtype=TORCH[d]), torch.tensor(rv0, dtype=TORCH[d])) if stats else (None, None)
    wrt = []
    kw = kb = tw = tb = None
    if affine:
        w0, b0 = rng.standard_normal(c), rng.standard_normal(c)
        kw, kb = K.from_numpy(w0, d), K.from_numpy(b0, d)
        tw = torch.tensor(w0, dtype=TORCH[d], requires_grad=True)
        tb = torch.tensor(b0, dtype=TORCH[d], requires_grad=True)
        wrt = [(kw, tw), (kb, tb)]
    ran = check(lambda a: K.batch_norm(a, krm, krv, kw, kb, training, momentum, 1e-5),
                lambda a: F.batch_norm(a, trm, trv, tw, tb, training, momentum, 1e-5),
                k, t, d, rng, f"batch_norm {shape} training {training}", wrt)
    if ran and stats:  # the running stats were updated in place (training) or left alone
        close(krm.to_numpy(), trm, d, "running_mean")
        close(krv.to_numpy(), trv, d, "running_var")


SPECIAL = np.array([-np.inf, -0.0, 0.0, 1.0, 2.0, np.nan])


@st.composite
def special_pool_args(draw):
    """Small windows (the elementwise chain) and windows of more than 32
    taps (nn/pooling.c's key/amin fallback), with padding, dilation and
    ceil_mode."""
    nd = draw(st.integers(1, 3))
    big = draw(st.booleans())
    if big:
        kernel = {1: [draw(st.integers(33, 40))], 2: [6, draw(st.integers(6, 7))],
                  3: [4, 3, draw(st.integers(3, 4))]}[nd]
    else:
        kernel = [draw(st.integers(1, 3)) for _ in range(nd)]
    spatial = [k * draw(st.integers(1, 2)) + draw(st.integers(0, 2)) for k in kernel]
    stride = [draw(st.integers(1, k)) for k in kernel]
    padding = [draw(st.integers(0, k // 2)) for k in kernel]
    dilation = [draw(st.integers(1, 2)) for _ in range(nd)]
    if draw(st.booleans()):
        dilation = [1] * nd
    return nd, [2] + spatial, kernel, stride, padding, dilation, draw(st.booleans())


@examples(60)
@given(args=special_pool_args(), d=FLOATS, p_nan=st.sampled_from([0.0, 0.05, 0.3]),
       seed=st.integers(0, 2**32 - 1))
def test_max_pool_special_values(args, d, p_nan, seed):
    """Inputs of -inf, +-0, ties and NaN: the values bit for bit (the sign
    of a zero maximum, NaN where Torch has NaN) and the gradient where
    Torch sends it (a wrong choice moves a whole cotangent value; sums
    over overlapping windows may round differently)."""
    nd, shape, kernel, stride, padding, dilation, ceil = args
    rng = np.random.default_rng(seed)
    x = rng.choice(SPECIAL[:-1], size=shape)
    x[rng.random(shape) < p_nan] = np.nan
    k, t = pair(x, d, "contiguous")
    tf = [None, F.max_pool1d, F.max_pool2d, F.max_pool3d][nd]
    try:
        want = tf(t, kernel, stride, padding, dilation, ceil_mode=ceil)
    except RuntimeError:
        return
    got = K.max_pool(k, kernel, stride, padding, dilation, ceil)
    g, w = got.to_numpy(), want.detach().numpy()
    what = f"max_pool{nd}d {shape} k{kernel} s{stride} p{padding} d{dilation} ceil {ceil}"
    np.testing.assert_array_equal(g, w, err_msg=what)
    np.testing.assert_array_equal(np.signbit(g[~np.isnan(g)]), np.signbit(w[~np.isnan(w)]), err_msg=what)
    if empty_window(shape, kernel, stride, padding, dilation, ceil):
        return
    ct = rng.standard_normal(tuple(want.shape)).astype(NP[d])
    gk, = K.grad([got], [k], [K.from_numpy(ct, d)])
    gt, = torch.autograd.grad(want, [t], torch.from_numpy(ct))
    close(gk.to_numpy(), gt, d, what + ": gradient")  # overlapping windows add in another order


def test_max_pool_nan_and_ties():
    """NaN propagates; the gradient goes to the last NaN, to the first
    maximum among ties, and to an input element of a window that holds
    only -inf and padding — Torch's choices."""
    for x, kernel, stride, pad in (([1, np.nan, 3, np.nan, 2], 5, 5, 0), ([2, 2, 1, 2], 4, 4, 0),
                                   ([-np.inf, -np.inf, 1], 2, 2, 1), ([0] * 7, 3, 2, 1)):
        x = np.array([[x]], dtype=np.float64)
        k, t = pair(x, K.F64, "contiguous")
        y = K.max_pool(k, [kernel], [stride], [pad], None, False)
        ty = F.max_pool1d(t, kernel, stride, pad)
        np.testing.assert_array_equal(y.to_numpy(), ty.detach().numpy())
        g, = K.grad([K.sum(y, [], False)], [k])
        ty.sum().backward()
        np.testing.assert_array_equal(g.to_numpy(), t.grad.numpy())


@pytest.mark.parametrize("call", [
    lambda x: ("max_pool", (x, [2, 2], None, [2, 0], None, False), lambda t: F.max_pool2d(t, 2, padding=(2, 0))),
    lambda x: ("max_pool", (x, [5, 5], None, None, None, False), lambda t: F.max_pool2d(t, 5)),
    lambda x: ("max_pool", (x, [2, 2], [0, 1], None, None, False), lambda t: F.max_pool2d(t, 2, (0, 1))),
    lambda x: ("max_pool", (x, [2, 2], None, None, [0, 1], False), lambda t: F.max_pool2d(t, 2, dilation=(0, 1))),
    lambda x: ("max_pool", (x, [2, 2], None, [-1, 0], None, False), lambda t: F.max_pool2d(t, 2, padding=(-1, 0))),
    lambda x: ("avg_pool", (x, [2, 2], None, [2, 0], False, True), lambda t: F.avg_pool2d(t, 2, padding=(2, 0))),
    lambda x: ("avg_pool", (x, [7, 7], None, [1, 1], False, True), lambda t: F.avg_pool2d(t, 7, padding=1)),
    lambda x: ("max_pool", (K.view(x, [16]), [2], None, None, None, False), lambda t: F.max_pool1d(t.view(16), 2)),
    lambda x: ("max_pool", (K.narrow(x, 1, 0, 0), [2, 2], None, None, None, False),
               lambda t: F.max_pool2d(t[:, :0], 2)),
    lambda x: ("pad", (x, [1, 1, 1], K.PAD_CONSTANT, 0.0), lambda t: F.pad(t, (1, 1, 1))),
    lambda x: ("pad", (x, [1] * 10, K.PAD_CONSTANT, 0.0), lambda t: F.pad(t, (1,) * 10)),
    lambda x: ("pad", (x, [4, 0, 0, 0], K.PAD_REFLECT, 0.0), lambda t: F.pad(t, (4, 0, 0, 0), mode="reflect")),
    lambda x: ("pad", (x, [1, 1], K.PAD_REFLECT, 0.0), lambda t: F.pad(t, (1, 1), mode="reflect")),
    lambda x: ("pad", (x, [5, 0, 0, 0], K.PAD_CIRCULAR, 0.0), lambda t: F.pad(t, (5, 0, 0, 0), mode="circular")),
    lambda x: ("pad", (K.select(x, 0, 0), [1, 1, 1, 1], K.PAD_CIRCULAR, 0.0),
               lambda t: F.pad(t[0], (1, 1, 1, 1), mode="circular")),
    lambda x: ("pad", (x, [1, 1, 1, 1], K.PAD_REFLECT, 2.0),
               lambda t: F.pad(t, (1, 1, 1, 1), mode="reflect", value=2.0)),
    lambda x: ("pad", (x, [-3, -2, 0, 0], K.PAD_REPLICATE, 0.0), lambda t: F.pad(t, (-3, -2, 0, 0), mode="replicate")),
    lambda x: ("pad", (x, [-3, -2], K.PAD_CONSTANT, 0.0), lambda t: F.pad(t, (-3, -2))),
    lambda x: ("batch_norm", (x, None, None, None, None, False, 0.1, 1e-5),
               lambda t: F.batch_norm(t, None, None, training=False)),
    lambda x: ("batch_norm", (K.view(K.narrow(K.view(x, [16]), 0, 0, 2), [1, 2]), None, None, None, None, True, 0.1,
                              1e-5),
               lambda t: F.batch_norm(t.view(16)[:2].view(1, 2), None, None, training=True)),
    lambda x: ("batch_norm", (x, K.from_numpy(np.zeros(2)), K.from_numpy(np.ones(1)), None, None, False, 0.1, 1e-5),
               lambda t: F.batch_norm(t, torch.zeros(2, dtype=t.dtype), torch.ones(1, dtype=t.dtype))),
])
def test_errors(call):
    """Calls Torch refuses: Kiln refuses them too, naming the function."""
    x = K.from_numpy(np.arange(16, dtype=np.float64).reshape(1, 1, 4, 4))
    name, args, tf = call(x)
    with pytest.raises(Exception):
        tf(torch.arange(16, dtype=torch.float64).reshape(1, 1, 4, 4))
    with pytest.raises(K.KilnError) as e:
        getattr(K, name)(*args)
    assert "kiln_" + name in e.value.message
    K.clear_error()
