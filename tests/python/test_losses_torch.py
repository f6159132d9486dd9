"""The pointwise losses of nn/loss_pointwise.c against PyTorch 1.13:
binary_cross_entropy (with and without logits, weights, pos_weight),
l1_loss, smooth_l1_loss, huber_loss and kl_div — values and gradients
(kiln_grad against autograd with a random cotangent, w.r.t. input
and target; tests/test_losses.c checks the weights' by differences) for every reduction, F32 and F64, contiguous and
transposed inputs, including the points where the formulas switch
branch; and the errors. Skips with torch absent.
"""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import examples, import_torch  # noqa: E402

torch = import_torch("losses")
import torch.nn.functional as F  # noqa: E402

import kiln_ctypes as K  # noqa: E402
import test_nn_functional_torch as NF  # noqa: E402  (pair, check)

FLOATS = st.sampled_from([K.F32, K.F64])
RED = NF.RED
SHAPES = st.lists(st.integers(1, 5), min_size=1, max_size=4)
SEEDS = st.integers(0, 2**32 - 1)


def inputs(seed, shape, d, kinds):
    """One pair per kind: 'n' normal * 2, 'p' probability in (0.02,
    0.98), 'lp' log-probabilities (log of a probability)."""
    rng = np.random.default_rng(seed)
    out = []
    for kind in kinds:
        if kind == "n":
            x = rng.standard_normal(shape) * 2
        else:
            x = rng.uniform(0.02, 0.98, shape)
            if kind == "lp":
                x = np.log(x)
        out.append(x.astype(NF.NP[d]))
    return out


@examples(60)
@given(d=FLOATS, shape=SHAPES, reduction=st.sampled_from(sorted(RED)),
       weighted=st.booleans(), transposed=st.booleans(), seed=SEEDS)
def test_binary_cross_entropy(d, shape, reduction, weighted, transposed,
                              seed):
    x, t, w = inputs(seed, shape, d, ["p", "p", "p"])
    k, tt, kv, tv = NF.pair(x, transposed)
    k2, t2, kv2, tv2 = NF.pair(t, transposed)
    kins, tins = [k, k2], [tt, t2]
    kw = tw = None
    if weighted:  # a weight per element of the last dim (broadcast); Torch
        # does not differentiate w.r.t. it
        wl = w.reshape(-1)[: kv.shape[-1]].copy()
        kw, tw = K.from_numpy(wl), torch.from_numpy(wl.copy())
    NF.check(K.binary_cross_entropy(kv, kv2, kw, RED[reduction]),
             F.binary_cross_entropy(tv, tv2, tw, reduction=reduction),
             kins, tins, d, f"bce({shape}, {reduction}, {weighted})")


@examples(60)
@given(d=FLOATS, shape=SHAPES, reduction=st.sampled_from(sorted(RED)),
       weighted=st.booleans(), pos=st.booleans(), transposed=st.booleans(),
       seed=SEEDS)
def test_binary_cross_entropy_with_logits(d, shape, reduction, weighted, pos,
                                          transposed, seed):
    x, t, w, pw = inputs(seed, shape, d, ["n", "p", "p", "p"])
    x = x * 10  # far into both tails
    x.reshape(-1)[0] = 0  # the branch point of the stable form
    k, tt, kv, tv = NF.pair(x, transposed)
    k2, t2, kv2, tv2 = NF.pair(t, transposed)
    kins, tins = [k, k2], [tt, t2]
    last = kv.shape[-1]
    opt = {}
    for name, on, v in (("weight", weighted, w), ("pos_weight", pos, pw * 3)):
        if on:
            vl = v.reshape(-1)[:last].copy()
            # Torch does not differentiate w.r.t. the weights (tested in C)
            opt[name] = (K.from_numpy(vl), torch.from_numpy(vl.copy()))
    kw, tw = opt.get("weight", (None, None))
    kp, tp = opt.get("pos_weight", (None, None))
    NF.check(K.binary_cross_entropy_with_logits(kv, kv2, kw, kp, RED[reduction]),
             F.binary_cross_entropy_with_logits(tv, tv2, tw, reduction=reduction, pos_weight=tp),
             kins, tins, d, f"bce_logits({shape}, {reduction}, {weighted}, {pos})")


def test_bce_with_logits_extremes():
    """No overflow at +-800 (F64) and +-100 (F32): Torch's values, and the
    gradient sigmoid(x) - t."""
    for d, big in ((K.F64, 800.0), (K.F32, 100.0)):
        x = np.array([-big, -30, 0, 30, big], NF.NP[d])
        t = np.array([1, 0.5, 0.25, 0.5, 0], NF.NP[d])
        k, tt, _, _ = NF.pair(x)
        k2, t2, _, _ = NF.pair(t)
        NF.check(K.binary_cross_entropy_with_logits(k, k2, None, None, K.REDUCTION_NONE),
                 F.binary_cross_entropy_with_logits(tt, t2, reduction="none"),
                 [k, k2], [tt, t2], d, f"extremes {d}")


PIECEWISE = {
    "l1": (lambda k, k2, r, p: K.l1_loss(k, k2, r),
           lambda t, t2, r, p: F.l1_loss(t, t2, reduction=r)),
    "smooth_l1": (lambda k, k2, r, p: K.smooth_l1_loss(k, k2, r, p),
                  lambda t, t2, r, p: F.smooth_l1_loss(t, t2, reduction=r, beta=p)),
    "huber": (lambda k, k2, r, p: K.huber_loss(k, k2, r, p),
              lambda t, t2, r, p: F.huber_loss(t, t2, reduction=r, delta=p)),
}


@examples(80)
@given(d=FLOATS, shape=SHAPES, reduction=st.sampled_from(sorted(RED)),
       op=st.sampled_from(sorted(PIECEWISE)), param=st.sampled_from([0.0, 0.3, 1.0, 2.5]),
       transposed=st.booleans(), seed=SEEDS)
def test_piecewise_losses(d, shape, reduction, op, param, transposed, seed):
    if op == "huber" and param == 0:
        param = 0.7
    x, t = inputs(seed, shape, d, ["n", "n"])
    # keep |x - t| away from the kinks, where the one-sided slopes differ
    diff = x - t
    x[np.abs(np.abs(diff) - param) < 1e-3] += 0.01
    x[np.abs(diff) < 1e-3] += 0.01
    k, tt, kv, tv = NF.pair(x, transposed)
    k2, t2, kv2, tv2 = NF.pair(t, transposed)
    kf, tf = PIECEWISE[op]
    NF.check(kf(kv, kv2, RED[reduction], param), tf(tv, tv2, reduction, param),
             [k, k2], [tt, t2], d, f"{op}({shape}, {reduction}, {param})")


KL_RED = dict(RED, batchmean=K.REDUCTION_BATCHMEAN)


@pytest.mark.filterwarnings("ignore:reduction. 'mean' divides")
@examples(60)
@given(d=FLOATS, shape=SHAPES, reduction=st.sampled_from(sorted(KL_RED)),
       log_target=st.booleans(), zeros=st.booleans(), transposed=st.booleans(),
       seed=SEEDS)
def test_kl_div(d, shape, reduction, log_target, zeros, transposed, seed):
    x, t = inputs(seed, shape, d, ["lp", "lp" if log_target else "p"])
    if zeros and not log_target:
        t.reshape(-1)[::2] = 0  # xlogy(0, 0) = 0
    k, tt, kv, tv = NF.pair(x, transposed)
    k2, t2, kv2, tv2 = NF.pair(t, transposed)
    out = K.kl_div(kv, kv2, KL_RED[reduction], log_target)
    want = F.kl_div(tv, tv2, reduction=reduction, log_target=log_target)
    # the gradient w.r.t. a target of 0 is Torch's NaN-or-not business:
    # compare the target's gradient only where every target is > 0
    wrt = ([k, k2], [tt, t2]) if (log_target or not zeros) else ([k], [tt])
    NF.check(out, want, wrt[0], wrt[1], d, f"kl_div({shape}, {reduction}, {log_target})")


def test_loss_errors():
    a = K.from_numpy(np.zeros((2, 3)))
    b = K.from_numpy(np.zeros((3, 2)))
    f32 = K.from_numpy(np.zeros((2, 3), np.float32))
    i64 = K.from_numpy(np.zeros((2, 3), np.int64))
    cases = [
        (lambda: K.l1_loss(a, b, 0), K.ERR_SHAPE, "kiln_l1_loss"),
        (lambda: K.l1_loss(a, f32, 0), K.ERR_DTYPE, "kiln_l1_loss"),
        (lambda: K.huber_loss(a, i64, 0, 1.0), K.ERR_DTYPE, "kiln_huber_loss"),
        (lambda: K.huber_loss(a, a, 0, 0.0), K.ERR_ARG, "delta"),
        (lambda: K.smooth_l1_loss(a, a, 0, -1.0), K.ERR_ARG, "beta"),
        (lambda: K.smooth_l1_loss(a, a, 0, float("nan")), K.ERR_ARG, "beta"),
        (lambda: K.l1_loss(a, a, K.REDUCTION_BATCHMEAN), K.ERR_ARG, "reduction"),
        (lambda: K.l1_loss(a, a, 7), K.ERR_ARG, "reduction"),
        (lambda: K.binary_cross_entropy(a, a, K.from_numpy(np.ones(2)), 0), K.ERR_SHAPE,
         "weight sizes [2] do not broadcast"),
        (lambda: K.binary_cross_entropy_with_logits(a, a, None, K.from_numpy(np.ones((4, 3))), 0),
         K.ERR_SHAPE, "pos_weight"),
        (lambda: K.kl_div(a, b, K.REDUCTION_BATCHMEAN, False), K.ERR_SHAPE, "kiln_kl_div"),
    ]
    for f, status, text in cases:
        with pytest.raises(K.KilnError) as e:
            f()
        assert e.value.status == status, text
        assert text in str(e.value)
