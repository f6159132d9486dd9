"""The accumulating scatters against PyTorch 1.13: kiln_scatter_add_,
kiln_index_put_ (accumulate or not, I64 indices and BOOL/U8 masks),
kiln_bincount and kiln_histc on
seeded random inputs — every dtype Torch accepts for each, targets read
through transposed and stepped views, duplicate indices — and the errors
Torch raises (with the target left unchanged). Float sums with duplicates
are compared with a tolerance relative to the sum of the magnitudes added
into each element (the order of additions may differ from Torch's).
The number of random cases scales with KILN_TEST_SCALE; the guards that
the interesting cases occurred hold at every scale (the first cases are
fixed). Skips with torch absent (Debian python3-torch).
"""
import numpy as np
import pytest

from conftest import SCALE, import_torch  # noqa: E402

torch = import_torch("scatters'")

import kiln_ctypes as K  # noqa: E402
import oracle as O  # noqa: E402

torch.set_num_threads(1)

TORCH_DTYPE = {K.BOOL: torch.bool, K.U8: torch.uint8, K.I8: torch.int8,
               K.I16: torch.int16, K.I32: torch.int32, K.I64: torch.int64,
               K.F16: torch.float16, K.BF16: torch.bfloat16,
               K.F32: torch.float32, K.F64: torch.float64}
EPS = {K.F16: 2.0**-10, K.BF16: 2.0**-7, K.F32: 2.0**-23, K.F64: 2.0**-52}


def cases(n):
    return max(4, int(n * SCALE))


def to_torch(x, d):
    """NumPy values of Kiln dtype d (BF16: uint16 bits) as a Torch tensor."""
    if d == K.BF16:
        return torch.from_numpy(O.as_f32(x, d).copy()).to(torch.bfloat16)
    return torch.from_numpy(np.array(x, copy=True))


def from_torch(t, d):
    t = t.contiguous()
    if d == K.BF16:
        return K.f32_to_bf16_bits(t.float().numpy())
    return t.numpy()


def values(rng, d, shape):
    """Small values (no overflow in sums of a few of them)."""
    return O.random_values(rng, d, shape, "small")


def target(rng, d, shape, layout):
    """A Kiln and a Torch tensor of sizes `shape` over fresh storages:
    contiguous, the transpose of a contiguous tensor (needs 2+ dims), or
    every other element of dim 0 of a twice-as-long tensor (stepped).
    Returns (kiln view, torch view, kiln base, torch base)."""
    shape = list(shape)
    if layout == "transposed" and len(shape) >= 2:
        src = shape[:-2] + [shape[-1], shape[-2]]
        x = values(rng, d, src)
        kb, tb = K.from_numpy(x, d), to_torch(x, d)
        return K.transpose(kb, -1, -2), tb.transpose(-1, -2), kb, tb
    if layout == "stepped" and shape:
        src = [2 * shape[0]] + shape[1:]
        x = values(rng, d, src)
        kb, tb = K.from_numpy(x, d), to_torch(x, d)
        return K.slice(kb, 0, 1, 2 * shape[0], 2), tb[1::2], kb, tb
    x = values(rng, d, shape)
    k, t = K.from_numpy(x, d), to_torch(x, d)
    return k, t, k, t


def assert_sum_close(got, want, bound, d, n_terms, what):
    """got == want for ints and BOOL; for floats within n_terms * eps of
    `bound` (float64: per element, the sum of the magnitudes added),
    NaN where want is NaN."""
    if not K.is_float(d):
        O.assert_same(got, want, d, what=what)
        return
    g, w = O.as_f64(got, d), O.as_f64(want, d)
    assert g.shape == w.shape, what
    tol = (n_terms + 1) * EPS[d] * bound
    ok = (np.isnan(g) & np.isnan(w)) | (g == w) | (np.abs(g - w) <= tol)
    assert ok.all(), (what, g[~ok][:5], w[~ok][:5], tol[~ok][:5])


def abs_f64(t):
    return t.to(torch.float64).abs() if t.dtype != torch.bool else \
        t.to(torch.float64)


LAYOUTS = ["contiguous", "transposed", "stepped"]

# ------------------------------------------------------------ scatter_add_


def scatter_add_case(rng, d, shape, dim, layout):
    nd = len(shape)
    dim_w = dim % max(nd, 1)
    # index sizes: <= t off dim, anything (here up to 5) at dim
    ish = [int(rng.integers(0, s + 1)) if k != dim_w else
           int(rng.integers(1, 6)) for k, s in enumerate(shape)]
    ssh = [s + int(rng.integers(0, 2)) for s in ish]  # src may be larger
    tdim = shape[dim_w] if nd else 1
    idx = rng.integers(0, max(tdim, 1), size=ish).astype(np.int64)
    src = values(rng, d, ssh)
    k, t, kb, tb = target(rng, d, shape, layout)
    ki, ti = K.from_numpy(idx), torch.from_numpy(idx)
    ks, ts = K.from_numpy(src, d), to_torch(src, d)
    bound = abs_f64(t).scatter_add(dim, ti, abs_f64(ts))
    K.scatter_add_(k, dim, ki, ks)
    t.scatter_add_(dim, ti, ts)
    what = f"scatter_add_({K.DTYPE_NAMES[d]}, {shape}, dim {dim}, {layout})"
    assert_sum_close(k.to_numpy(), from_torch(t, d), bound.numpy(), d,
                     max(ish[dim_w] if nd else 1, 1), what)
    # the base storage (the elements outside the view too)
    assert_sum_close(kb.to_numpy(), from_torch(tb, d),
                     abs_f64(tb).numpy() + np.abs(src).sum(), d,
                     max(ish[dim_w] if nd else 1, 1), what + " base")
    dup = idx.size > 0 and (nd == 0 or any(
        len(np.unique(col)) < len(col)
        for col in np.moveaxis(idx, dim_w, -1).reshape(-1, idx.shape[dim_w])))
    return dup


def test_scatter_add_random():
    rng = np.random.default_rng(1)
    dups = 0
    fixed = [(K.F32, [3, 4], 0, "contiguous"), (K.I64, [4, 3], 1, "transposed"),
             (K.F16, [5, 2], 0, "stepped"), (K.BOOL, [3], 0, "contiguous")]
    for n in range(cases(150)):
        if n < len(fixed):
            d, shape, dim, layout = fixed[n]
        else:
            d = int(rng.choice(K.ALL_DTYPES))
            shape = [int(s) for s in rng.integers(0, 5, size=rng.integers(0, 4))]
            dim = int(rng.integers(-max(len(shape), 1), max(len(shape), 1)))
            layout = LAYOUTS[rng.integers(0, 3)]
        if shape and shape[dim % len(shape)] == 0:
            shape[dim % len(shape)] = 1  # an index into a 0-size dim can't exist
        dups += scatter_add_case(rng, d, shape, dim, layout)
    assert dups >= 2


def raises_both(kf, tf):
    """Torch raises and Kiln raises: Kiln's KilnError."""
    with pytest.raises((RuntimeError, IndexError)):
        tf()
    with pytest.raises(K.KilnError) as e:
        kf()
    return e.value


def test_scatter_add_errors():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    k, t = K.from_numpy(x), torch.from_numpy(x.copy())
    src = np.ones((2, 3), np.float32)
    ks, ts = K.from_numpy(src), torch.from_numpy(src)
    bad = [  # (dim, index, src dtype, status)
        (0, np.array([[0, 2, 1]]), K.F32, K.ERR_INDEX),
        (1, np.array([[0, -1]]), K.F32, K.ERR_INDEX),
        (0, np.array([[0, 1, 1]], np.int32), K.F32, K.ERR_DTYPE),
        (0, np.array([[0, 1, 1]]), K.F64, K.ERR_DTYPE),
        (0, np.array([[0, 1, 1, 0]]), K.F32, K.ERR_SHAPE),
        (0, np.array([0, 1]), K.F32, K.ERR_SHAPE),
        (2, np.array([[0]]), K.F32, K.ERR_ARG),
    ]
    for dim, idx, sd, status in bad:
        s_k = ks if sd == K.F32 else K.to_dtype(ks, sd)
        s_t = ts if sd == K.F32 else ts.to(torch.float64)
        ki = K.from_numpy(idx)
        ti = torch.from_numpy(idx)
        e = raises_both(lambda: K.scatter_add_(k, dim, ki, s_k),
                        lambda: t.scatter_add_(dim, ti, s_t))
        assert e.status == status, (idx, e.message)
        assert e.message.startswith("kiln_scatter_add_:")
        K.clear_error()
        O.assert_same(k.to_numpy(), x, K.F32, what="unchanged")
    # src smaller than the index
    e = raises_both(
        lambda: K.scatter_add_(k, 0, K.from_numpy(np.zeros((1, 3), np.int64)),
                               K.from_numpy(np.ones((1, 2), np.float32))),
        lambda: t.scatter_add_(0, torch.zeros(1, 3, dtype=torch.long),
                               torch.ones(1, 2)))
    assert e.status == K.ERR_SHAPE
    K.clear_error()
    O.assert_same(k.to_numpy(), x, K.F32, what="unchanged")


# -------------------------------------------------------------- index_put_


def index_put_case(rng, d, shape, n_idx, accumulate, layout, negative):
    r = shape[n_idx:]
    bshape = [int(s) for s in rng.integers(0, 4, size=rng.integers(0, 3))]
    idx = []
    for j in range(n_idx):
        # each index takes bshape with some dims 1 or leading dims dropped
        sh = [s if rng.random() < 0.7 else 1 for s in bshape]
        sh = sh[int(rng.integers(0, len(sh) + 1)) if rng.random() < 0.3 else 0:]
        lo = -shape[j] if negative else 0
        idx.append(rng.integers(lo, shape[j], size=sh).astype(np.int64))
    indexed = list(np.broadcast_shapes(*[i.shape for i in idx])) + r
    vshape = indexed[int(rng.integers(0, len(indexed) + 1)):]
    vshape = [s if rng.random() < 0.8 else 1 for s in vshape]
    v = values(rng, d, vshape)
    k, t, kb, tb = target(rng, d, shape, layout)
    kis = [K.from_numpy(i) for i in idx]
    tis = tuple(torch.from_numpy(i) for i in idx)
    kv, tv = K.from_numpy(v, d), to_torch(v, d)
    bound = None
    if accumulate:
        bound = abs_f64(t).index_put_(tis, abs_f64(tv), accumulate=True)
    K.index_put_(k, len(kis), kis, kv, accumulate)
    t.index_put_(tis, tv, accumulate=accumulate)
    what = (f"index_put_({K.DTYPE_NAMES[d]}, {shape}, {[i.shape for i in idx]}"
            f", values {vshape}, acc {accumulate}, {layout})")
    n_terms = int(np.prod(np.broadcast_shapes(*[i.shape for i in idx])))
    if accumulate:
        assert_sum_close(k.to_numpy(), from_torch(t, d), bound.numpy(), d,
                         n_terms, what)
    else:
        O.assert_same(k.to_numpy(), from_torch(t, d), d, what=what)
    assert_sum_close(kb.to_numpy(), from_torch(tb, d),
                     abs_f64(tb).numpy() + np.abs(O.as_f64(v, d)).sum()
                     * n_terms, d, n_terms, what + " base")
    lin = np.ravel_multi_index(
        [np.broadcast_to(i % s, np.broadcast_shapes(*[j.shape for j in idx]))
         .ravel() for i, s in zip(idx, shape)], shape[:n_idx]) \
        if n_terms else np.zeros(0)
    return len(np.unique(lin)) < len(lin)


def test_index_put_random():
    rng = np.random.default_rng(2)
    dups = {True: 0, False: 0}
    for n in range(cases(150)):
        if n < 4:  # fixed: both modes with duplicates, negative indices
            d = [K.F32, K.I32, K.F64, K.BF16][n]
            shape, n_idx = [3, 2], 1
            accumulate, layout, negative = n % 2 == 0, LAYOUTS[n % 3], True
            rng_case = np.random.default_rng(100 + n)
        else:
            d = int(rng.choice(K.ALL_DTYPES))
            shape = [int(s) for s in rng.integers(1, 5, size=rng.integers(1, 4))]
            n_idx = int(rng.integers(1, len(shape) + 1))
            accumulate = bool(rng.integers(0, 2))
            layout = LAYOUTS[rng.integers(0, 3)]
            negative = bool(rng.integers(0, 2))
            rng_case = rng
        if n < 4:
            # three writes into three slots: a duplicate for sure
            idx = [np.array([2, -1, 0], np.int64)]
            v = values(rng_case, d, [3, 2])
            k, t, _, _ = target(rng_case, d, shape, layout)
            K.index_put_(k, 1, [K.from_numpy(idx[0])], K.from_numpy(v, d),
                         accumulate)
            t.index_put_((torch.from_numpy(idx[0]),), to_torch(v, d),
                         accumulate=accumulate)
            O.assert_same(k.to_numpy(), from_torch(t, d), d,
                          rtol=4 * EPS.get(d, 0), what=f"fixed {n}")
            dups[accumulate] += 1
            continue
        dups[accumulate] += index_put_case(rng_case, d, shape, n_idx,
                                           accumulate, layout, negative)
    assert dups[True] >= 1 and dups[False] >= 1


def test_index_put_masks():
    """BOOL and U8 masks (alone, or after an I64 index), accumulate or not,
    through transposed and stepped targets."""
    import warnings
    rng = np.random.default_rng(5)
    selected = 0
    for n in range(cases(40)):
        d = [K.F32, K.I32, K.BF16, K.F64][n % 4]
        shape = [int(s) for s in rng.integers(1, 5, size=rng.integers(2, 4))]
        lead = n % 3 == 2  # an I64 index before the mask
        k_dims = int(rng.integers(1, len(shape) - lead + 1))
        mdt = [np.bool_, np.uint8][n % 2]
        pos = 1 if lead else 0
        mask = rng.random(shape[pos:pos + k_dims]) < 0.5
        if n == 0:
            mask[...] = True
        count = int(mask.sum())
        selected += count
        idx = [np.array(int(rng.integers(0, shape[0])))] if lead else []
        accumulate = bool(n % 2)
        vshape = [count] + shape[pos + k_dims:]
        v = values(rng, d, vshape)
        k, t, _, _ = target(rng, d, shape, LAYOUTS[n % 3])
        kis = [K.from_numpy(np.asarray(i, np.int64)) for i in idx] + \
            [K.from_numpy(mask.astype(mdt))]
        tis = tuple(torch.from_numpy(np.asarray(i, np.int64)) for i in idx) + \
            (torch.from_numpy(mask.astype(mdt)),)
        K.index_put_(k, len(kis), kis, K.from_numpy(v, d), accumulate)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # U8 masks are deprecated
            t.index_put_(tis, to_torch(v, d), accumulate=accumulate)
        O.assert_same(k.to_numpy(), from_torch(t, d), d,
                      rtol=2 * EPS.get(d, 0),
                      what=f"mask {mask.shape} in {shape}, lead {lead}")
    assert selected > 0
    # a mask whose sizes are not t's
    x = np.zeros((2, 3), np.float32)
    e = raises_both(
        lambda: K.index_put_(K.from_numpy(x), 1,
                             [K.from_numpy(np.array([True, False, True]))],
                             K.from_numpy(np.float32(1)), False),
        lambda: torch.from_numpy(x).index_put_(
            (torch.tensor([True, False, True]),), torch.tensor(1.0)))
    assert e.status == K.ERR_SHAPE
    K.clear_error()


def test_index_put_errors():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    k, t = K.from_numpy(x), torch.from_numpy(x.copy())
    L = lambda *v: np.array(v, np.int64)  # noqa: E731
    bad = [  # (indices, values, status)
        ([L(0, 1), L(1, 3)], np.float32(5), K.ERR_INDEX),
        ([L(-3)], np.float32(5), K.ERR_INDEX),
        ([L(0)], np.float64(5), K.ERR_DTYPE),
        ([np.array([0], np.int32)], np.float32(5), K.ERR_DTYPE),
        ([L(0), L(0), L(0)], np.float32(5), K.ERR_SHAPE),
        ([L(0, 1), L(0, 1, 2)], np.float32(5), K.ERR_SHAPE),
        ([L(0, 1)], np.ones(2, np.float32), K.ERR_SHAPE),
        ([L(0, 1)], np.ones((1, 1, 1), np.float32), K.ERR_SHAPE),
    ]
    for accumulate in (False, True):
        for idx, v, status in bad:
            kv = K.from_numpy(np.asarray(v), K.F64 if np.asarray(v).dtype
                              == np.float64 else K.F32)
            e = raises_both(
                lambda: K.index_put_(k, len(idx), [K.from_numpy(i) for i in idx],
                                     kv, accumulate),
                lambda: t.index_put_(tuple(torch.from_numpy(i) for i in idx),
                                     torch.from_numpy(np.asarray(v)),
                                     accumulate=accumulate))
            assert e.status == status, (idx, e.message)
            assert e.message.startswith("kiln_index_put_:")
            K.clear_error()
            O.assert_same(k.to_numpy(), x, K.F32, what="unchanged")


# ---------------------------------------------------------------- bincount


def test_bincount_random():
    rng = np.random.default_rng(3)
    weighted = 0
    for n in range(cases(100)):
        d = int(rng.choice(K.INT_DTYPES))
        size = int(rng.integers(0, 30))
        hi = int(rng.integers(0, 20))
        x = rng.integers(0, hi + 1, size=size).astype(K.NP_DTYPE[d])
        minlength = int(rng.integers(0, 25))
        wd = None if n % 3 == 0 else int(rng.choice(K.ALL_DTYPES))
        if n < 2:
            wd = K.F32 if n else K.I32
        kx, tx = K.from_numpy(x, d), torch.from_numpy(x)
        if n % 4 == 1 and size > 1:  # a stepped view
            kx, tx = K.slice(kx, 0, 0, size, 2), tx[0::2]
        kw = tw = None
        if wd is not None:
            w = values(rng, wd, [kx.shape[0]])
            kw, tw = K.from_numpy(w, wd), to_torch(w, wd)
            weighted += 1
        got = K.bincount(kx, kw, minlength)
        want = torch.bincount(tx, tw, minlength)
        gd = {v: k for k, v in TORCH_DTYPE.items()}[want.dtype]
        assert got.dtype == gd, (wd, got.dtype, want.dtype)
        what = f"bincount({K.DTYPE_NAMES[d]}, weights {wd}, {minlength})"
        bound = torch.bincount(tx, abs_f64(tw) if tw is not None else None,
                               minlength).to(torch.float64).numpy()
        assert_sum_close(got.to_numpy(), from_torch(want, gd), bound, gd,
                         kx.shape[0], what)
    assert weighted >= 2


def test_bincount_errors():
    cases_ = [
        (np.array([1, -1]), None, 0, K.ERR_ARG),
        (np.array([1.0, 2.0], np.float32), None, 0, K.ERR_DTYPE),
        (np.array([True, False]), None, 0, K.ERR_DTYPE),
        (np.array([[1, 2]]), None, 0, K.ERR_SHAPE),
        (np.array([1, 2]), None, -1, K.ERR_ARG),
        (np.array([1, 2]), np.ones(3, np.float32), 0, K.ERR_SHAPE),
    ]
    for x, w, minlength, status in cases_:
        kx = K.from_numpy(x)
        kw = None if w is None else K.from_numpy(w)
        e = raises_both(
            lambda: K.bincount(kx, kw, minlength),
            lambda: torch.bincount(torch.from_numpy(x), None if w is None
                                   else torch.from_numpy(w), minlength))
        assert e.status == status, (x, e.message)
        assert e.message.startswith("kiln_bincount:")
        K.clear_error()


# ------------------------------------------------------------------- histc

HISTC_DTYPES = [K.F32, K.F64, K.BF16]  # Torch 1.13's CPU histc (no F16)


def test_histc_random():
    rng = np.random.default_rng(4)
    kinds = set()
    for n in range(cases(150)):
        d = HISTC_DTYPES[n % 3]
        shape = [int(s) for s in rng.integers(0, 5, size=rng.integers(1, 3))]
        x = O.random_values(rng, d, shape,
                            "special" if n % 5 == 4 else "small")
        bins = int(rng.integers(1, 12))
        mode = ["given", "data", "given"][n % 3] if n >= 3 else \
            ["given", "data", "equal"][n]
        if mode == "equal":
            x = np.full(shape, O.random_values(rng, d, []), K.NP_DTYPE[d])
        if mode == "given":
            lo = float(rng.integers(-8, 4)) + (0.5 if rng.random() < 0.5
                                               else 0)
            hi = lo + float(rng.choice([0.5, 1, 3, 7.25, 16]))
        else:
            lo = hi = float(rng.choice([0, 1.5]))
        kx, tx = K.from_numpy(x, d), to_torch(x, d)
        if len(shape) == 2 and n % 2:
            kx, tx = K.transpose(kx, 0, 1), tx.t()
        try:
            want = torch.histc(tx, bins, lo, hi)
        except RuntimeError:  # a data range with NaN/inf
            with pytest.raises(K.KilnError) as e:
                K.histc(kx, bins, lo, hi)
            assert e.value.status == K.ERR_ARG
            K.clear_error()
            kinds.add("error")
            continue
        got = K.histc(kx, bins, lo, hi)
        assert got.dtype == d and got.shape == (bins,)
        O.assert_same(got.to_numpy(), from_torch(want, d), d,
                      what=f"histc({K.DTYPE_NAMES[d]}, {shape}, {bins}, "
                           f"{lo}, {hi})")
        kinds.add(mode)
    assert {"given", "data", "equal"} <= kinds


def test_histc_edges():
    # values on every bin edge, the max in the last bin, 0.1 steps
    for d in HISTC_DTYPES:
        for x, bins, lo, hi in [
                (np.linspace(0, 1, 11), 10, 0, 1),
                (np.linspace(-3, 3, 25), 8, -3, 3),
                (np.array([0.0, 0.3, 0.7, 1.0, 1.1, -0.1, np.nan, np.inf]),
                 3, 0, 1)]:
            v = x.astype(np.float32) if d != K.F64 else x
            kx = K.from_numpy(v if d != K.BF16 else v.astype(np.float32), d)
            tx = torch.from_numpy(np.array(v)).to(TORCH_DTYPE[d])
            O.assert_same(K.histc(kx, bins, lo, hi).to_numpy(),
                          from_torch(torch.histc(tx, bins, lo, hi), d), d,
                          what=f"histc edges {K.DTYPE_NAMES[d]} {bins}")


def test_histc_errors():
    x = np.array([1.0, 2.0, 5.0], np.float32)
    for v, d, bins, lo, hi, status in [
            (x, K.F32, 0, 0, 3, K.ERR_ARG),
            (x, K.F32, -1, 0, 3, K.ERR_ARG),
            (x, K.F32, 3, 3, 1, K.ERR_ARG),
            (x, K.F32, 3, 0, np.inf, K.ERR_ARG),
            (x, K.F32, 3, np.nan, 2, K.ERR_ARG),
            (np.array([1.0, np.nan], np.float32), K.F32, 3, 0, 0, K.ERR_ARG),
            (np.array([1, 2], np.int64), K.I64, 3, 0, 3, K.ERR_DTYPE),
            (np.array([1, 2], np.int32), K.I32, 3, 0, 3, K.ERR_DTYPE),
            (np.array([True]), K.BOOL, 3, 0, 3, K.ERR_DTYPE)]:
        e = raises_both(lambda: K.histc(K.from_numpy(v, d), bins, lo, hi),
                        lambda: torch.histc(torch.from_numpy(v), bins, lo, hi))
        assert e.status == status, (v, bins, lo, hi, e.message)
        assert e.message.startswith("kiln_histc:")
        K.clear_error()


def test_histc_f16_beyond_torch():
    # Torch 1.13 has no CPU histc for Half; Kiln's equals the F32 one on
    # values exact in F16
    x = np.array([0.5, 1.0, 1.5, 2.0, 2.5, 3.0, -1.0], np.float16)
    got = K.histc(K.from_numpy(x, K.F16), 6, 0, 3).to_numpy()
    want = torch.histc(torch.from_numpy(x.astype(np.float32)), 6, 0, 3)
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got.astype(np.float32), want.numpy())
