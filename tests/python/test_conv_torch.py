"""kiln_conv and kiln_conv_transpose against PyTorch 1.13
(torch.nn.functional.conv{1,2,3}d and conv_transpose{1,2,3}d): values and
the gradients of input, weight and bias (kiln_grad against
torch.autograd.grad with the same random cotangent) on random problems —
1-, 2- and 3-D, stride, padding, dilation, groups (depthwise included),
output padding, unbatched inputs, transposed (non-contiguous) inputs, F32
and F64 — and Torch's errors for bad arguments. Skips with torch absent
(Debian python3-torch; scripts/setup.sh installs it).
"""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import examples, import_torch  # noqa: E402

torch = import_torch("convolution")

import kiln_ctypes as K  # noqa: E402
# (the binding fills kiln_conv's nd in from the length of stride: calls
# pass stride, padding and dilation as lists of nd entries)

torch.set_num_threads(1)
F = torch.nn.functional
CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
CONV_T = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}
NP = {K.F32: np.float32, K.F64: np.float64}
TOL = {K.F32: 2e-5, K.F64: 1e-12}


@st.composite
def problems(draw, transpose):
    nd = draw(st.integers(1, 3), label="nd")
    groups = draw(st.sampled_from([1, 1, 2, 3]), label="groups")
    cin = groups * draw(st.integers(1, 3), label="channels per group")
    cout = groups * draw(st.integers(1, 3), label="outputs per group")
    lim = {1: 9, 2: 6, 3: 4}[nd]
    k = [draw(st.integers(1, 3)) for _ in range(nd)]
    stride = [draw(st.integers(1, 3)) for _ in range(nd)]
    dil = [draw(st.integers(1, 2)) for _ in range(nd)]
    pad = [draw(st.integers(0, 2)) for _ in range(nd)]
    size = []
    for i in range(nd):
        lo = 1 if transpose else max(1, dil[i] * (k[i] - 1) + 1 - 2 * pad[i])
        size.append(draw(st.integers(lo, max(lo, lim))))
    outpad = [draw(st.integers(0, max(stride[i], dil[i]) - 1))
              if transpose else 0 for i in range(nd)]
    if transpose:  # Torch needs a positive output size
        for i in range(nd):
            while ((size[i] - 1) * stride[i] - 2 * pad[i]
                   + dil[i] * (k[i] - 1) + outpad[i] + 1) < 1:
                size[i] += 1
    return dict(nd=nd, groups=groups, cin=cin, cout=cout, k=k,
                stride=stride, dil=dil, pad=pad, size=size, outpad=outpad,
                batch=draw(st.sampled_from([0, 1, 2]), label="batch"),
                bias=draw(st.booleans(), label="bias"),
                transposed_input=draw(st.booleans(), label="transposed"),
                dtype=draw(st.sampled_from([K.F32, K.F64]), label="dtype"))


def kiln_input(x, d, transposed):
    """x as a Kiln tensor, read through a transpose of its last two dims
    when asked (then not contiguous)."""
    if transposed and x.ndim >= 2:
        return K.transpose(K.from_numpy(np.ascontiguousarray(
            np.swapaxes(x, -1, -2)), d), -1, -2)
    return K.from_numpy(x, d)


def run(p, transpose, seed):
    rng = np.random.default_rng(seed)
    d, nd, g = p["dtype"], p["nd"], p["groups"]
    lead = (p["batch"],) if p["batch"] else ()
    x = rng.standard_normal(lead + (p["cin"],) + tuple(p["size"])).astype(NP[d])
    wshape = ((p["cin"], p["cout"] // g) if transpose
              else (p["cout"], p["cin"] // g)) + tuple(p["k"])
    w = rng.standard_normal(wshape).astype(NP[d])
    b = rng.standard_normal(p["cout"]).astype(NP[d]) if p["bias"] else None
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    tb = torch.tensor(b, requires_grad=True) if b is not None else None
    kx, kw = kiln_input(x, d, p["transposed_input"]), K.from_numpy(w, d)
    kb = K.from_numpy(b, d) if b is not None else None
    if transpose:
        want = CONV_T[nd](tx, tw, tb, p["stride"], p["pad"], p["outpad"], g,
                          p["dil"])
        got = K.conv_transpose(kx, kw, kb, p["stride"], p["pad"],
                               p["outpad"], g, p["dil"])
    else:
        want = CONV[nd](tx, tw, tb, p["stride"], p["pad"], p["dil"], g)
        got = K.conv(kx, kw, kb, p["stride"], p["pad"], p["dil"], g)
    assert got.shape == tuple(want.shape)
    scale = 1 + np.abs(want.detach().numpy()).max(initial=0)
    np.testing.assert_allclose(got.to_numpy(), want.detach().numpy(),
                               rtol=0, atol=TOL[d] * scale * 10)
    # gradients with one random cotangent
    c = rng.standard_normal(tuple(want.shape)).astype(NP[d])
    wrt_t = [tx, tw] + ([tb] if tb is not None else [])
    wrt_k = [kx, kw] + ([kb] if kb is not None else [])
    gt = torch.autograd.grad(want, wrt_t, torch.tensor(c))
    gk = K.grad([got], wrt_k, [K.from_numpy(c, d)])
    for name, a, e in zip(["input", "weight", "bias"], gk, gt):
        e = e.numpy()
        s = 1 + np.abs(e).max(initial=0)
        np.testing.assert_allclose(a.to_numpy(), e, rtol=0,
                                   atol=TOL[d] * s * 20, err_msg=name)


@examples(40)
@given(p=problems(False), seed=st.integers(0, 2**32 - 1))
def test_conv(p, seed):
    run(p, False, seed)


@examples(40)
@given(p=problems(True), seed=st.integers(0, 2**32 - 1))
def test_conv_transpose(p, seed):
    run(p, True, seed)


def test_depthwise_and_strided_fixed():
    """A fixed depthwise 2-D case with stride and dilation (always run,
    whatever the example count)."""
    p = dict(nd=2, groups=4, cin=4, cout=8, k=[3, 3], stride=[2, 1],
             dil=[1, 2], pad=[1, 2], size=[9, 8], outpad=[0, 0], batch=2,
             bias=True, transposed_input=True, dtype=K.F64)
    run(p, False, 5)
    p.update(outpad=[1, 0], cin=4, cout=4)
    run(p, True, 6)


def test_implicit_gemm_edges_fixed():
    """The implicit GEMM's edges (runtime/gemm_pack.c packs the columns
    from the padded input): K = C/G·ΠK and N·ΠOut multiples of no block
    size, spanning several KC and NC blocks (F32: 333 and 4,845), padding
    wider than the kernel, batch 1, 1-D and 3-D; values and gradients."""
    cases = [
        dict(nd=2, groups=1, cin=37, cout=5, k=[3, 3], stride=[1, 1],
             dil=[1, 1], pad=[1, 1], size=[51, 19], batch=5, dtype=K.F32),
        dict(nd=2, groups=1, cin=3, cout=7, k=[2, 2], stride=[1, 1],
             dil=[1, 1], pad=[3, 4], size=[5, 6], batch=1, dtype=K.F64),
        dict(nd=1, groups=1, cin=5, cout=3, k=[5], stride=[3], dil=[2],
             pad=[2], size=[200], batch=1, dtype=K.F32),
        dict(nd=3, groups=2, cin=4, cout=6, k=[3, 2, 3], stride=[1, 1, 2],
             dil=[1, 2, 1], pad=[2, 1, 3], size=[6, 5, 7], batch=2,
             dtype=K.F64),
    ]
    for i, p in enumerate(cases):
        p.update(outpad=[0] * p["nd"], bias=True, transposed_input=False)
        run(p, False, 40 + i)


def test_errors_like_torch():
    x = np.zeros((1, 4, 5, 5), np.float32)
    w = np.zeros((6, 2, 3, 3), np.float32)
    kx, kw = K.from_numpy(x), K.from_numpy(w)
    tx, tw = torch.tensor(x), torch.tensor(w)
    cases = [  # (kiln call, torch call, status)
        (lambda: K.conv(kx, kw, None, [1, 1], [0, 0], [1, 1], 3),
         lambda: F.conv2d(tx, tw, None, 1, 0, 1, 3), K.ERR_SHAPE),
        (lambda: K.conv(kx, kw, None, [1, 1], [0, 0], [3, 3], 2),
         lambda: F.conv2d(tx, tw, None, 1, 0, 3, 2), K.ERR_SHAPE),
        (lambda: K.conv(kx, kw, None, [0, 1], [0, 0], [1, 1], 2),
         lambda: F.conv2d(tx, tw, None, (0, 1), 0, 1, 2), K.ERR_ARG),
        (lambda: K.conv(kx, kw, None, [1, 1], [-1, 0], [1, 1], 2),
         lambda: F.conv2d(tx, tw, None, 1, (-1, 0), 1, 2), K.ERR_ARG),
        (lambda: K.conv(kx, K.from_numpy(w.astype(np.float64)), None,
                        [1, 1], [0, 0], [1, 1], 2),
         lambda: F.conv2d(tx, tw.double(), None, 1, 0, 1, 2), K.ERR_DTYPE),
        (lambda: K.conv_transpose(kx, K.from_numpy(np.zeros((4, 3, 3, 3),
                                  np.float32)), None, [1, 1], [0, 0], [1, 1],
                                  1, [1, 1]),
         lambda: F.conv_transpose2d(tx, torch.zeros(4, 3, 3, 3), None, 1, 0,
                                    1, 1, 1), K.ERR_ARG),
    ]
    for kcall, tcall, status in cases:
        with pytest.raises(RuntimeError):
            tcall()
        with pytest.raises(K.KilnError) as e:
            kcall()
        assert e.value.status == status
