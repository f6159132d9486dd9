"""adaptive_avg_pool / adaptive_max_pool (nn/adaptive_pool.c) and
interpolate (nn/interpolate.c, nearest and (bi/tri)linear, align_corners
both ways, sizes and scale factors) against PyTorch 1.13: values and
gradients (kiln_grad against autograd, random cotangent) over 1, 2 and 3
spatial dims, shrinking and growing, F32 and F64, contiguous and
transposed inputs. Skips with torch absent.
"""
import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from conftest import examples, import_torch  # noqa: E402

torch = import_torch("resample")
import torch.nn.functional as F  # noqa: E402

import kiln_ctypes as K  # noqa: E402
import test_nn_functional_torch as NF  # noqa: E402  (pair, check)

FLOATS = st.sampled_from([K.F32, K.F64])
SEEDS = st.integers(0, 2**32 - 1)


def operand(d, shape, transposed, seed):
    x = np.random.default_rng(seed).standard_normal(shape).astype(NF.NP[d])
    if transposed:  # the same values read through a transposed layout
        xt = np.ascontiguousarray(np.swapaxes(x, 0, 1))
        k, t, _, _ = NF.pair(xt)
        return k, t, K.transpose(k, 0, 1), t.transpose(0, 1)
    k, t, _, _ = NF.pair(x)
    return k, t, k, t


@examples(80)
@given(d=FLOATS, nd=st.integers(1, 3), data=st.data(), batch=st.booleans(),
       op=st.sampled_from(["avg", "max"]), transposed=st.booleans(), seed=SEEDS)
def test_adaptive_pool(d, nd, data, batch, op, transposed, seed):
    size = data.draw(st.lists(st.integers(1, 9), min_size=nd, max_size=nd))
    out = data.draw(st.lists(st.integers(1, 7), min_size=nd, max_size=nd))
    shape = ([2] if batch else []) + [3] + size
    k, t, kv, tv = operand(d, shape, transposed, seed)
    tf = getattr(F, f"adaptive_{op}_pool{nd}d")
    kf = K.adaptive_avg_pool if op == "avg" else K.adaptive_max_pool
    NF.check(kf(kv, out), tf(tv, out), [k], [t], d,
             f"adaptive_{op}_pool({shape} -> {out})")


MODES = {"nearest": K.INTERP_NEAREST, "linear": K.INTERP_LINEAR}
LINEAR_NAME = {1: "linear", 2: "bilinear", 3: "trilinear"}


@examples(120)
@given(d=FLOATS, nd=st.integers(1, 3), data=st.data(),
       mode=st.sampled_from(sorted(MODES)), align=st.booleans(),
       by_scale=st.booleans(), transposed=st.booleans(), seed=SEEDS)
def test_interpolate(d, nd, data, mode, align, by_scale, transposed, seed):
    size = data.draw(st.lists(st.integers(1, 8), min_size=nd, max_size=nd))
    align = align and mode == "linear"
    shape = [2, 3] + size
    k, t, kv, tv = operand(d, shape, transposed, seed)
    tmode = mode if mode == "nearest" else LINEAR_NAME[nd]
    if by_scale:
        sf = data.draw(st.lists(st.sampled_from([0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 3.0]),
                                min_size=nd, max_size=nd))
        if any(int(np.floor(s * f)) < 1 for s, f in zip(size, sf)):
            return
        kout = K.interpolate(kv, scale_factor=sf, mode=MODES[mode], align_corners=align)
        tout = F.interpolate(tv, scale_factor=sf, mode=tmode,
                             align_corners=align if mode == "linear" else None)
    else:
        out = data.draw(st.lists(st.integers(1, 11), min_size=nd, max_size=nd))
        kout = K.interpolate(kv, out, mode=MODES[mode], align_corners=align)
        tout = F.interpolate(tv, size=out, mode=tmode,
                             align_corners=align if mode == "linear" else None)
    NF.check(kout, tout, [k], [t], d, f"interpolate({shape}, {tmode}, {align}, {by_scale})")


def test_nearest_picks_torchs_pixel():
    """Sizes where floor(dst * in / out) exactly and Torch's float
    floorf(dst * (float)in / out) differ (found by search: e.g. 2 -> 82,
    dst 41): the values are Torch's exactly, and not the exact rule's."""
    for n_in, n_out in [(2, 82), (3, 123), (24, 74), (45, 87), (52, 22), (108, 38), (7, 3)]:
        x = np.arange(n_in, dtype=np.float32).reshape(1, 1, n_in)
        got = K.interpolate(K.from_numpy(x), [n_out]).to_numpy()
        want = F.interpolate(torch.from_numpy(x), size=n_out, mode="nearest").numpy()
        np.testing.assert_array_equal(got, want)
        exact = np.minimum(np.arange(n_out) * n_in // n_out, n_in - 1)
        assert (n_in, n_out) == (7, 3) or not np.array_equal(got.reshape(-1), exact)


def test_resample_errors():
    x = K.from_numpy(np.zeros((1, 2, 4, 4)))
    cases = [
        (lambda: K.adaptive_avg_pool(x, [0, 2]), K.ERR_ARG, "output_size [0, 2]"),
        (lambda: K.adaptive_max_pool(x, [1, 1, 1, 1]), K.ERR_ARG, "nd 4"),
        (lambda: K.adaptive_max_pool(x, [2]), K.ERR_SHAPE, "2-D or 3-D"),
        (lambda: K.interpolate(x, [3, 3], [2.0, 2.0]), K.ERR_ARG, "exactly one"),
        (lambda: K.interpolate(x, [3, 3], align_corners=True), K.ERR_ARG, "align_corners"),
        (lambda: K.interpolate(x, [3, 3], mode=7), K.ERR_ARG, "mode 7"),
        (lambda: K.interpolate(x, scale_factor=[0.0, 2.0], mode=K.INTERP_LINEAR), K.ERR_ARG,
         "scale_factor 0"),
        (lambda: K.interpolate(x, [3], mode=K.INTERP_LINEAR), K.ERR_SHAPE, "3-D input"),
        (lambda: K.interpolate(K.from_numpy(np.zeros((1, 2, 4), np.int32)), [3]), K.ERR_DTYPE,
         "float"),
    ]
    for f, status, text in cases:
        try:
            f()
        except K.KilnError as e:
            assert e.status == status, (text, str(e))
            assert text in str(e), str(e)
        else:
            raise AssertionError(f"no error: {text}")
