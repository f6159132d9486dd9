"""group_norm and instance_norm (nn/group_norm.c) against PyTorch 1.13:
values and gradients w.r.t. input, weight and bias (kiln_grad against
autograd, random cotangent) on random shapes, F32 and F64, contiguous
and permuted (non-contiguous) inputs, with and without the affine
parameters. Skips with torch absent.
"""
import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from conftest import examples, import_torch  # noqa: E402

torch = import_torch("norms")
import torch.nn.functional as F  # noqa: E402

import kiln_ctypes as K  # noqa: E402
import test_nn_functional_torch as NF  # noqa: E402  (check)

FLOATS = st.sampled_from([K.F32, K.F64])


def operands(d, n, c, spatial, affine, permuted, seed):
    rng = np.random.default_rng(seed)
    shape = [n, c] + spatial
    x = (rng.standard_normal(shape) * 3 + 1).astype(NF.NP[d])
    k, t = K.from_numpy(x), torch.from_numpy(x.copy()).requires_grad_(True)
    kv, tv = k, t
    if permuted:  # the same values read through a permuted layout
        perm = list(range(len(shape)))[::-1]
        xp = np.ascontiguousarray(x.transpose(perm))
        k, t = K.from_numpy(xp), torch.from_numpy(xp.copy()).requires_grad_(True)
        kv, tv = K.permute(k, perm), t.permute(perm)
    kins, tins, kw = [k], [t], [None, None]
    tw = [None, None]
    if affine:
        for i in range(2):
            p = rng.standard_normal(c).astype(NF.NP[d])
            kw[i], tw[i] = K.from_numpy(p), torch.from_numpy(p.copy()).requires_grad_(True)
            kins.append(kw[i])
            tins.append(tw[i])
    return kv, tv, kw, tw, kins, tins


@examples(60)
@given(d=FLOATS, n=st.integers(1, 3), cg=st.integers(1, 3), g=st.integers(1, 3),
       spatial=st.lists(st.integers(1, 4), max_size=3), affine=st.booleans(),
       permuted=st.booleans(), eps=st.sampled_from([1e-5, 0.1]),
       seed=st.integers(0, 2**32 - 1))
def test_group_norm(d, n, cg, g, spatial, affine, permuted, eps, seed):
    if cg * int(np.prod(spatial)) < 3:
        # with 1 or 2 elements per group the output is constant (0 or
        # +-1): the gradient is rounding noise, not comparable
        spatial = spatial + [3]
    kv, tv, kw, tw, kins, tins = operands(d, n, cg * g, spatial, affine, permuted, seed)
    NF.check(K.group_norm(kv, g, kw[0], kw[1], eps), F.group_norm(tv, g, tw[0], tw[1], eps),
             kins, tins, d, f"group_norm({n}, {cg * g}, {spatial}, g={g})")


@examples(60)
@given(d=FLOATS, n=st.integers(1, 3), c=st.integers(1, 4),
       spatial=st.lists(st.integers(1, 4), min_size=1, max_size=3), affine=st.booleans(),
       permuted=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_instance_norm(d, n, c, spatial, affine, permuted, seed):
    if int(np.prod(spatial)) < 3:  # as in test_group_norm
        spatial = spatial + [3]
    kv, tv, kw, tw, kins, tins = operands(d, n, c, spatial, affine, permuted, seed)
    NF.check(K.instance_norm(kv, kw[0], kw[1], 1e-5),
             F.instance_norm(tv, weight=tw[0], bias=tw[1], eps=1e-5),
             kins, tins, d, f"instance_norm({n}, {c}, {spatial})")


def test_norm_errors():
    x = K.from_numpy(np.zeros((2, 6, 3)))
    cases = [
        (lambda: K.group_norm(x, 4, None, None, 1e-5), K.ERR_ARG, "num_groups 4"),
        (lambda: K.group_norm(x, 0, None, None, 1e-5), K.ERR_ARG, "num_groups 0"),
        (lambda: K.group_norm(x, 3, K.from_numpy(np.ones(3)), None, 1e-5), K.ERR_SHAPE,
         "weight has sizes [3]"),
        (lambda: K.group_norm(K.from_numpy(np.zeros(6)), 3, None, None, 1e-5), K.ERR_SHAPE,
         "at least 2 dims"),
        (lambda: K.group_norm(x, 3, None, None, -1.0), K.ERR_ARG, "eps"),
        (lambda: K.instance_norm(K.from_numpy(np.zeros((2, 6, 1))), None, None, 1e-5),
         K.ERR_SHAPE, "more than 1 spatial element"),
        (lambda: K.instance_norm(K.from_numpy(np.zeros((2, 6), np.int64)), None, None, 1e-5),
         K.ERR_DTYPE, "kiln_instance_norm"),
    ]
    for f, status, text in cases:
        try:
            f()
        except K.KilnError as e:
            assert e.status == status, text
            assert text in str(e), str(e)
        else:
            raise AssertionError(f"no error: {text}")
