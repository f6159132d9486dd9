"""The transformer's parts (nn/attention.c, gelu's tanh form, RMS norm,
weight tying) against PyTorch 1.13: values and gradients (kiln_grad
against autograd, random cotangent), F32 and F64.

Torch 1.13 has no F.scaled_dot_product_attention: the reference is Torch
2's math path written out, softmax(q·kᵀ·scale + mask)·v, with a BOOL mask
as -inf where false and is_causal as ones(L, S).tril(). Shapes are random,
with lengths that are not multiples of 8 and broadcast batch dims;
every BOOL mask keeps one key per query (a row with nothing kept is NaN
in both). Skips with torch absent.
"""
import math

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from conftest import examples, import_torch  # noqa: E402

torch = import_torch("attention")
import torch.nn.functional as F  # noqa: E402

import kiln_ctypes as K  # noqa: E402

torch.set_num_threads(1)

FLOATS = st.sampled_from([K.F32, K.F64])
NP = {K.F32: np.float32, K.F64: np.float64}
# the products sum over E and S: F32 rounding grows with them
TOL = {K.F32: dict(rtol=2e-4, atol=2e-5), K.F64: dict(rtol=1e-10, atol=1e-11)}


def leaf(x):
    return K.from_numpy(x), torch.from_numpy(x.copy()).requires_grad_(True)


def check(kout, tout, kins, tins, d, what):
    """Values equal; kiln_grad of sum(out * c) equals Torch's grads."""
    want = tout.detach().numpy()
    got = kout.to_numpy()
    assert got.shape == want.shape, what
    np.testing.assert_allclose(got, want, err_msg=what, **TOL[d])
    c = np.random.default_rng(7).uniform(-1, 1, want.shape).astype(NP[d])
    kg = K.grad(kout, kins, [K.from_numpy(c)])
    tg = torch.autograd.grad(tout, tins, torch.from_numpy(c))
    for j, (a, b) in enumerate(zip(kg, tg)):
        np.testing.assert_allclose(a.to_numpy(), b.numpy(), err_msg=f"{what}: grad {j}", **TOL[d])


def torch_sdpa(q, k, v, mask, is_causal, scale):
    """Torch 2's math path (aten/src/ATen/native/transformers/attention.cpp)."""
    L, S = q.shape[-2], k.shape[-2]
    s = q @ k.transpose(-2, -1) * (1 / math.sqrt(q.shape[-1]) if scale == 0 else scale)
    if is_causal:
        mask = torch.ones(L, S, dtype=torch.bool).tril()
    if mask is not None and mask.dtype == torch.bool:
        s = s.masked_fill(~mask, float("-inf"))
    elif mask is not None:
        s = s + mask
    return torch.softmax(s, -1) @ v


def batch_shapes(draw_batch, seed):
    """The batch dims of q, k, v: one full shape and each operand's own
    (a suffix, with some sizes 1: they broadcast)."""
    rng = np.random.default_rng(seed)
    full = list(draw_batch)
    out = []
    for _ in range(3):
        b = [s if rng.random() < 0.7 else 1 for s in full]
        out.append(b[int(rng.integers(0, len(b) + 1)):] if b else b)
    return full, out


@examples(40)
@given(d=FLOATS, batch=st.lists(st.integers(1, 3), max_size=2), L=st.integers(1, 19), S=st.integers(1, 19),
       E=st.integers(1, 13), Ev=st.integers(1, 11), mask=st.sampled_from(["none", "bool", "float", "causal"]),
       mask_rank=st.integers(0, 2), scale=st.sampled_from([0.0, 0.3, -1.5]), seed=st.integers(0, 2**32 - 1))
def test_sdpa(d, batch, L, S, E, Ev, mask, mask_rank, scale, seed):
    rng = np.random.default_rng(seed)
    _, (bq, bk, bv) = batch_shapes(batch, seed)
    q, tq = leaf(rng.standard_normal(bq + [L, E]).astype(NP[d]))
    k, tk = leaf(rng.standard_normal(bk + [S, E]).astype(NP[d]))
    v, tv = leaf(rng.standard_normal(bv + [S, Ev]).astype(NP[d]))
    kins, tins = [q, k, v], [tq, tk, tv]
    km = tm = None
    out = list(np.broadcast_shapes(tuple(bq), tuple(bk), tuple(bv))) + [L, S]
    mshape = out[len(out) - min(mask_rank + 2, len(out)):]
    if mask == "bool":
        m = rng.random(mshape) < 0.6
        m[..., 0] = True  # one key per query kept: no NaN row
        km, tm = K.from_numpy(m), torch.from_numpy(m.copy())
    elif mask == "float":
        km, tm = leaf(rng.standard_normal(mshape).astype(NP[d]))
        kins.append(km)
        tins.append(tm)
    causal = mask == "causal"
    what = f"sdpa q{bq + [L, E]} k{bk + [S, E]} v{bv + [S, Ev]} {mask}{mshape} scale {scale}"
    check(K.scaled_dot_product_attention(q, k, v, km, 0.0, causal, scale),
          torch_sdpa(tq, tk, tv, tm, causal, scale), kins, tins, d, what)


@examples(12)
@given(d=FLOATS, L=st.integers(1, 200), S=st.integers(1, 200), E=st.integers(1, 80), Ev=st.integers(1, 80),
       mask=st.sampled_from(["none", "bool", "float", "causal"]), seed=st.integers(0, 2**32 - 1))
def test_sdpa_blocks(d, L, S, E, Ev, mask, seed):
    """Lengths across the fused kernel's 64-query and 64-key blocks (not
    multiples of them; causal with L != S skips blocks), a head dim past
    the micro-kernel's tile, the mask broadcast over the heads."""
    rng = np.random.default_rng(seed)
    q, tq = leaf(rng.standard_normal([2, 3, L, E]).astype(NP[d]))
    k, tk = leaf(rng.standard_normal([2, 3, S, E]).astype(NP[d]))
    v, tv = leaf(rng.standard_normal([2, 1, S, Ev]).astype(NP[d]))
    kins, tins, km, tm = [q, k, v], [tq, tk, tv], None, None
    if mask == "bool":
        m = rng.random([2, 1, L, S]) < 0.5
        m[..., 0] = True
        km, tm = K.from_numpy(m), torch.from_numpy(m.copy())
    elif mask == "float":
        km, tm = leaf(rng.standard_normal([L, S]).astype(NP[d]))
        kins.append(km)
        tins.append(tm)
    causal = mask == "causal"
    check(K.scaled_dot_product_attention(q, k, v, km, 0.0, causal, 0.0), torch_sdpa(tq, tk, tv, tm, causal, 0.0),
          kins, tins, d, f"sdpa blocks L {L} S {S} E {E} Ev {Ev} {mask}")


def test_sdpa_dropout():
    """Dropout draws from Kiln's generator: reproducible under the seed,
    the kept fraction near 1 - p, the kept weights scaled by 1 / (1 - p):
    with v the identity the output is the dropped attention weights."""
    L, p = 64, 0.25
    rng = np.random.default_rng(3)
    q, k = (K.from_numpy(rng.standard_normal((L, 8))) for _ in range(2))
    v = K.from_numpy(np.eye(L))
    K.manual_seed(11)
    a = K.scaled_dot_product_attention(q, k, v, None, p, False, 0.0).to_numpy()
    K.manual_seed(11)
    b = K.scaled_dot_product_attention(q, k, v, None, p, False, 0.0).to_numpy()
    np.testing.assert_array_equal(a, b)
    w = K.scaled_dot_product_attention(q, k, v, None, 0.0, False, 0.0).to_numpy()
    kept = a != 0
    assert abs(kept.mean() - (1 - p)) < 0.03, kept.mean()
    np.testing.assert_allclose(a[kept], w[kept] / (1 - p), rtol=1e-12)


def test_sdpa_errors():
    x = K.from_numpy(np.zeros((2, 3, 4)))
    cases = [
        (lambda: K.scaled_dot_product_attention(x, x, x, K.from_numpy(np.ones((3, 3), bool)), 0.0, True, 0.0),
         K.ERR_ARG, "exclusive"),
        (lambda: K.scaled_dot_product_attention(x, x, x, None, 1.0, False, 0.0), K.ERR_ARG, "dropout_p"),
        (lambda: K.scaled_dot_product_attention(x, x, x, None, 0.0, False, float("nan")), K.ERR_ARG, "scale"),
        (lambda: K.scaled_dot_product_attention(x, K.from_numpy(np.zeros((2, 3, 5))), x, None, 0.0, False, 0.0),
         K.ERR_SHAPE, "last dim (E)"),
        (lambda: K.scaled_dot_product_attention(x, x, K.from_numpy(np.zeros((2, 4, 4))), None, 0.0, False, 0.0),
         K.ERR_SHAPE, "dim -2 (S)"),
        (lambda: K.scaled_dot_product_attention(K.from_numpy(np.zeros(4)), x, x, None, 0.0, False, 0.0),
         K.ERR_SHAPE, "at least 2 dims"),
        (lambda: K.scaled_dot_product_attention(x, K.from_numpy(np.zeros((3, 3, 4))), x, None, 0.0, False, 0.0),
         K.ERR_SHAPE, "do not broadcast"),
        (lambda: K.scaled_dot_product_attention(x, x, x, K.from_numpy(np.zeros((4, 3))), 0.0, False, 0.0),
         K.ERR_SHAPE, "attn_mask sizes [4, 3]"),
        (lambda: K.scaled_dot_product_attention(x, x, x, K.from_numpy(np.zeros((5, 2, 3, 3))), 0.0, False, 0.0),
         K.ERR_SHAPE, "attn_mask sizes"),
        (lambda: K.scaled_dot_product_attention(x, x, x, K.from_numpy(np.zeros((3, 3), np.float32)), 0.0, False,
                                                0.0), K.ERR_DTYPE, "attn_mask dtype f32"),
        (lambda: K.scaled_dot_product_attention(x, K.from_numpy(np.zeros((2, 3, 4), np.float32)), x, None, 0.0,
                                                False, 0.0), K.ERR_DTYPE, "differ"),
        (lambda: K.scaled_dot_product_attention(K.from_numpy(np.zeros((3, 4), np.int64)), x, x, None, 0.0, False,
                                                0.0), K.ERR_DTYPE, "float dtype"),
    ]
    for f, status, text in cases:
        try:
            f()
        except K.KilnError as e:
            assert e.status == status, (text, str(e))
            assert text in str(e), str(e)
            assert "kiln_scaled_dot_product_attention" in str(e)
        else:
            raise AssertionError(f"no error: {text}")


@examples(20)
@given(d=FLOATS, shape=st.lists(st.integers(1, 6), min_size=1, max_size=3), seed=st.integers(0, 2**32 - 1))
def test_gelu_tanh(d, shape, seed):
    x, t = leaf((np.random.default_rng(seed).standard_normal(shape) * 3).astype(NP[d]))
    check(K.gelu_tanh(x), F.gelu(t, approximate="tanh"), [x], [t], d, f"gelu_tanh {shape}")


@examples(20)
@given(d=FLOATS, shape=st.lists(st.integers(1, 6), min_size=1, max_size=3), n=st.integers(1, 3),
       affine=st.booleans(), eps=st.sampled_from([1e-6, 0.1]), seed=st.integers(0, 2**32 - 1))
def test_rms_norm(d, shape, n, affine, eps, seed):
    n = min(n, len(shape))
    rng = np.random.default_rng(seed)
    x, t = leaf((rng.standard_normal(shape) * 2 + 0.5).astype(NP[d]))
    kins, tins, kw, tw = [x], [t], None, None
    if affine:
        kw, tw = leaf(rng.standard_normal(shape[len(shape) - n:]).astype(NP[d]))
        kins.append(kw)
        tins.append(tw)
    dims = tuple(range(len(shape) - n, len(shape)))
    want = t * torch.rsqrt((t * t).mean(dims, keepdim=True) + eps)
    if affine:
        want = want * tw
    check(K.rms_norm(x, n, kw, eps), want, kins, tins, d, f"rms_norm {shape} n={n}")


def test_rms_norm_errors():
    x = K.from_numpy(np.zeros((2, 3)))
    for f, status, text in [
            (lambda: K.rms_norm(x, 3, None, 1e-5), K.ERR_ARG, "normalized_ndim 3"),
            (lambda: K.rms_norm(x, 1, K.from_numpy(np.ones(2)), 1e-5), K.ERR_SHAPE, "weight has sizes [2]"),
            (lambda: K.rms_norm(x, 1, None, -1.0), K.ERR_ARG, "eps"),
            (lambda: K.rms_norm(K.from_numpy(np.zeros(3, np.int64)), 1, None, 1e-5), K.ERR_DTYPE, "float")]:
        try:
            f()
        except K.KilnError as e:
            assert e.status == status and text in str(e), str(e)
        else:
            raise AssertionError(f"no error: {text}")


def test_weight_tying():
    """One parameter W [V, D] as the token embedding and the output
    projection (a GPT's tied weights): its gradient sums both uses, as
    autograd's."""
    rng = np.random.default_rng(5)
    V, D, T = 11, 6, 7
    idx = rng.integers(0, V, (2, T))
    kw, tw = leaf(rng.standard_normal((V, D)))
    kp, tp = leaf(rng.standard_normal((T, D)))
    ki = K.from_numpy(idx)
    kpos = K.from_numpy(np.arange(T))
    h = K.add(K.embedding(kw, ki), K.embedding(kp, kpos))
    logits = K.linear(K.gelu_tanh(h), kw, None)
    th = F.embedding(torch.from_numpy(idx), tw) + F.embedding(torch.arange(T), tp)
    tl = F.linear(F.gelu(th, approximate="tanh"), tw)
    check(logits, tl, [kw, kp], [tw, tp], K.F64, "tied embedding and projection")
