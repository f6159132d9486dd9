"""The sorting ops against PyTorch 1.13: kiln_sort / argsort, topk, max /
min with indices, kthvalue, median, mode and unique on random shapes
(0-size dims included), random dims (negative too), keepdim, transposed
and stepped views, every dtype, floats with NaN/inf/±0 and many ties.

Torch computes the reference in a wide dtype of the same order (floats in
F64, BOOL as U8, integers as I64: every Kiln value converts exactly and
ties stay ties), since Torch 1.13 lacks topk, kthvalue and median for BOOL
and F16 and unique for F16. Values are compared exactly. Indices are
compared exactly where Torch's choice is deterministic: the stable sort,
max/min (first occurrence, NaN wins), topk rows without ties, the median
of a row holding NaN (its first NaN), mode rows of up to 16 elements
without NaN (Torch's std::sort is an insertion sort there). Elsewhere the
indices must point at the values: x.gather(dim, indices) == values.
Skips with torch absent (Debian python3-torch).
"""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import examples, import_torch  # noqa: E402

torch = import_torch("sorting ops'")

import kiln_ctypes as K  # noqa: E402
import oracle as O  # noqa: E402

torch.set_num_threads(1)

DTYPES = st.sampled_from(K.ALL_DTYPES)


def wide(x, d):
    """Kiln-representation values x of dtype d in a wide NumPy dtype of the
    same order: F64 for floats, U8 for BOOL, I64 for integers."""
    if K.is_float(d):
        return np.asarray(O.as_f64(x, d))
    return np.asarray(x).astype(np.uint8 if d == K.BOOL else np.int64)


def draw(seed, d, shape, view, ties):
    """Random values (Kiln representation of d) in `shape`, read through
    `view` ("plain", "transposed" — the last two dims swapped — or
    "stepped" — every other element of dim 0): the Kiln tensor and the
    NumPy array of the same logical values. ties: values from a few
    distinct ones."""
    rng = np.random.default_rng(seed)
    base_shape = list(shape)
    if view == "stepped":
        base_shape[0] = 2 * shape[0]
    if view == "transposed":
        base_shape[-1], base_shape[-2] = shape[-2], shape[-1]
    if ties:
        x = O.random_values(rng, d, base_shape, "small")
        pool = O.random_values(rng, d, [4], "special")
        x = pool[rng.integers(0, 4, size=base_shape)] if x.size else x
    else:
        x = O.random_values(rng, d, base_shape, "special")
    k = K.from_numpy(np.ascontiguousarray(x), d)
    if view == "stepped":
        k, x = K.slice(k, 0, 0, base_shape[0], 2), x[::2]
    if view == "transposed":
        k, x = K.transpose(k, -1, -2), np.swapaxes(x, -1, -2)
    return k, x


SHAPES = st.lists(st.integers(0, 5), min_size=1, max_size=3)
VIEWS = st.sampled_from(["plain", "plain", "transposed", "stepped"])


def case(shape, view, dim):
    if view == "transposed" and len(shape) < 2:
        view = "plain"
    return view, dim % len(shape) - (len(shape) if dim < 0 else 0)


def same_values(kv, tv, what):
    """Kiln values (wide) equal Torch's (wide; NaN equal NaN)."""
    tv = tv.numpy()
    assert kv.shape == tv.shape, (what, kv.shape, tv.shape)
    if kv.dtype.kind == "f":
        both_nan = np.isnan(kv) & np.isnan(tv)
        assert np.all(both_nan | (kv == tv)), (what, kv, tv)
    else:
        assert np.array_equal(kv, tv), (what, kv, tv)


def gathered(x, idx, dim, keepdim):
    """x's elements at idx along dim (idx without dim when not keepdim)."""
    if not keepdim and x.ndim:
        idx = np.expand_dims(idx, dim)
    g = np.take_along_axis(x, idx, dim) if x.ndim else x
    return g if keepdim or not x.ndim else np.squeeze(g, dim)


@examples(80)
@given(d=DTYPES, shape=SHAPES, view=VIEWS, dim=st.integers(-3, 2),
       descending=st.booleans(), ties=st.booleans(),
       seed=st.integers(0, 2**32 - 1))
def test_sort_argsort(d, shape, view, dim, descending, ties, seed):
    view, dim = case(shape, view, dim)
    k, x = draw(seed, d, shape, view, ties)
    v, i = K.sort(k, dim, descending, True)
    want = torch.sort(torch.from_numpy(wide(x, d)), stable=True, dim=dim,
                      descending=descending)
    assert v.dtype == d and i.dtype == K.I64
    assert K.is_contiguous(v) and K.is_contiguous(i)
    np.testing.assert_array_equal(i.to_numpy(), want.indices.numpy())
    O.assert_same(v.to_numpy(), np.take_along_axis(x, want.indices.numpy(),
                                                    dim), d, what="sort")
    a = K.argsort(k, dim, descending, False)  # Kiln's is stable anyway
    np.testing.assert_array_equal(a.to_numpy(), want.indices.numpy())


def has_ties(row):
    """A row with equal elements (all NaNs are equal here)."""
    w = np.where(np.isnan(row), np.inf, row) if row.dtype.kind == "f" \
        else row
    nan = np.isnan(row).sum() if row.dtype.kind == "f" else 0
    finite = w[~np.isnan(row)] if row.dtype.kind == "f" else w
    return nan > 1 or len(np.unique(finite)) < len(finite)


@examples(80)
@given(d=DTYPES, shape=SHAPES, view=VIEWS, dim=st.integers(-3, 2),
       largest=st.booleans(), ties=st.booleans(), kf=st.floats(0, 1),
       seed=st.integers(0, 2**32 - 1))
def test_topk(d, shape, view, dim, largest, ties, kf, seed):
    view, dim = case(shape, view, dim)
    k, x = draw(seed, d, shape, view, ties)
    n = x.shape[dim]
    kk = int(round(kf * n))
    v, i = K.topk(k, kk, dim, largest, True)
    xw = wide(x, d)
    want = torch.topk(torch.from_numpy(xw), kk, dim, largest, sorted=True)
    idx = i.to_numpy()
    same_values(wide(v.to_numpy(), d), want.values, "topk values")
    O.assert_same(v.to_numpy(), np.take_along_axis(x, idx, dim), d,
                  what="topk gather")
    if kk == 0:
        assert idx.size == 0
        return
    rows = np.moveaxis(xw, dim, -1).reshape(-1, n)
    ki, ti = (np.moveaxis(a, dim, -1).reshape(-1, kk)
              for a in (idx, want.indices.numpy()))
    for r, row in enumerate(rows):
        if not has_ties(row):
            np.testing.assert_array_equal(ki[r], ti[r])


@examples(80)
@given(d=DTYPES, shape=SHAPES, view=VIEWS, dim=st.integers(-3, 2),
       keepdim=st.booleans(), ties=st.booleans(),
       seed=st.integers(0, 2**32 - 1))
def test_max_min(d, shape, view, dim, keepdim, ties, seed):
    view, dim = case(shape, view, dim)
    k, x = draw(seed, d, shape, view, ties)
    tx = torch.from_numpy(wide(x, d))
    for kf, tf in ((K.max, torch.max), (K.min, torch.min)):
        if x.shape[dim] == 0:
            with pytest.raises(IndexError):
                tf(tx, dim, keepdim)
            with pytest.raises(K.KilnError) as e:
                kf(k, dim, keepdim)
            assert e.value.status == K.ERR_SHAPE
            continue
        v, i = kf(k, dim, keepdim)
        want = tf(tx, dim, keepdim)
        np.testing.assert_array_equal(i.to_numpy(), want.indices.numpy())
        O.assert_same(v.to_numpy(), gathered(x, want.indices.numpy(), dim,
                                             keepdim), d, what=tf.__name__)


@examples(80)
@given(d=DTYPES, shape=SHAPES, view=VIEWS, dim=st.integers(-3, 2),
       keepdim=st.booleans(), ties=st.booleans(), kf=st.floats(0, 1),
       seed=st.integers(0, 2**32 - 1))
def test_kthvalue_median(d, shape, view, dim, keepdim, ties, kf, seed):
    view, dim = case(shape, view, dim)
    k, x = draw(seed, d, shape, view, ties)
    n = x.shape[dim]
    tx = torch.from_numpy(wide(x, d))
    if n == 0:
        for call in (lambda: K.median(k, dim, keepdim),
                     lambda: K.kthvalue(k, 1, dim, keepdim)):
            with pytest.raises(K.KilnError) as e:
                call()
            assert e.value.status == K.ERR_SHAPE
        with pytest.raises(IndexError):
            torch.median(tx, dim, keepdim)
        return
    kk = 1 + int(kf * (n - 1))
    for name, kres, tres in (
            ("kthvalue", K.kthvalue(k, kk, dim, keepdim),
             torch.kthvalue(tx, kk, dim, keepdim)),
            ("median", K.median(k, dim, keepdim),
             torch.median(tx, dim, keepdim))):
        v, i = kres
        idx = i.to_numpy()
        same_values(wide(v.to_numpy(), d), tres.values, name)
        O.assert_same(v.to_numpy(), gathered(x, idx, dim, keepdim), d,
                      what=name + " gather")
        # exact where Torch is deterministic: a row holding NaN (median:
        # its first NaN) or a row without ties
        rows = np.moveaxis(wide(x, d), dim, -1).reshape(-1, n)
        ki = idx.reshape(-1)
        ti = tres.indices.numpy().reshape(-1)
        for r, row in enumerate(rows):
            nan = row.dtype.kind == "f" and np.isnan(row).any()
            if (name == "median" and nan) or not has_ties(row):
                assert ki[r] == ti[r], (name, row, ki[r], ti[r])


@examples(80)
@given(d=DTYPES, shape=SHAPES, view=VIEWS, dim=st.integers(-3, 2),
       keepdim=st.booleans(), ties=st.booleans(),
       seed=st.integers(0, 2**32 - 1))
def test_mode(d, shape, view, dim, keepdim, ties, seed):
    view, dim = case(shape, view, dim)
    k, x = draw(seed, d, shape, view, ties)
    n = x.shape[dim]
    if n == 0:
        with pytest.raises(K.KilnError) as e:
            K.mode(k, dim, keepdim)
        assert e.value.status == K.ERR_SHAPE
        return
    v, i = K.mode(k, dim, keepdim)
    want = torch.mode(torch.from_numpy(wide(x, d)), dim, keepdim)
    idx = i.to_numpy()
    O.assert_same(v.to_numpy(), gathered(x, idx, dim, keepdim), d,
                  what="mode gather")
    rows = np.moveaxis(wide(x, d), dim, -1).reshape(-1, n)
    kv = wide(v.to_numpy(), d).reshape(-1)
    tv = want.values.numpy().reshape(-1)
    ki, ti = idx.reshape(-1), want.indices.numpy().reshape(-1)
    for r, row in enumerate(rows):
        if row.dtype.kind == "f" and np.isnan(row).any():
            continue  # Torch's order of NaN in std::sort is unspecified
        assert kv[r] == tv[r], ("mode", row, kv[r], tv[r])
        if n <= 16:
            assert ki[r] == ti[r], ("mode index", row, ki[r], ti[r])


@examples(60)
@given(d=DTYPES, shape=st.lists(st.integers(0, 5), min_size=0, max_size=3),
       view=VIEWS, ties=st.booleans(), sort=st.booleans(),
       seed=st.integers(0, 2**32 - 1))
def test_unique(d, shape, view, ties, sort, seed):
    if not shape:
        view = "plain"
    if len(shape) < 2 and view == "transposed":
        view = "plain"
    k, x = draw(seed, d, shape, view, ties)
    xw = wide(x, d)
    if xw.dtype.kind == "f" and np.isnan(xw).any():
        # Torch 1.13's CPU unique is unspecified with NaN: Kiln makes all
        # NaNs one value, sorted last
        xw = np.where(np.isnan(xw), np.inf, xw)  # same runs, NaN last
        nan = True
    else:
        nan = False
    v, inv, cnt = K.unique(k, sort, True, True)
    want_v, want_inv, want_cnt = torch.unique(
        torch.from_numpy(xw), sorted=True, return_inverse=True,
        return_counts=True)
    kv = wide(v.to_numpy(), d)
    if nan:
        # +inf and NaN are distinct in Kiln: compare the runs through the
        # counts, merging a trailing inf run with the NaN run
        assert np.isnan(kv[-1])
        kv = np.where(np.isnan(kv), np.inf, kv)
        kc = cnt.to_numpy()
        if len(kv) >= 2 and kv[-2] == np.inf:
            kv, kc = kv[:-1], np.concatenate([kc[:-2], [kc[-2] + kc[-1]]])
        np.testing.assert_array_equal(kv, want_v.numpy())
        np.testing.assert_array_equal(kc, want_cnt.numpy())
        return
    same_values(kv, want_v, "unique values")
    np.testing.assert_array_equal(inv.to_numpy(), want_inv.numpy())
    np.testing.assert_array_equal(cnt.to_numpy(), want_cnt.numpy())
    # the values are elements of x, one per run
    O.assert_same(v.to_numpy(),
                  x.reshape(-1)[np.argmax(inv.to_numpy().reshape(-1)[None]
                                          == np.arange(len(kv))[:, None],
                                          axis=1)] if x.size else
                  np.zeros(0, K.NP_DTYPE[d]), d, what="unique")


@pytest.mark.parametrize("fn", ["sort", "max", "median", "kthvalue", "mode",
                                "topk"])
def test_zero_dim(fn):
    x = np.array(5.5, np.float32)
    k, t = K.from_numpy(x, K.F32), torch.from_numpy(x)
    for dim in (0, -1):
        if fn == "sort":
            got, want = K.sort(k, dim, True, True), torch.sort(t, dim, True)
        elif fn == "kthvalue":
            got, want = K.kthvalue(k, 1, dim, True), torch.kthvalue(t, 1, dim)
        elif fn == "topk":
            got, want = K.topk(k, 1, dim, True, True), torch.topk(t, 1, dim)
        else:
            got = getattr(K, fn)(k, dim, False)
            want = getattr(torch, fn)(t, dim)
        assert got[0].shape == () and got[1].shape == ()
        assert got[0].to_numpy() == want[0].numpy()
        assert got[1].to_numpy() == want[1].numpy()


def test_errors_match_torch():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    k, t = K.from_numpy(x, K.F32), torch.from_numpy(x)
    with pytest.raises(IndexError):
        torch.sort(t, 2)
    with pytest.raises(K.KilnError) as e:
        K.sort(k, 2, False, True)
    assert e.value.status == K.ERR_ARG
    for kk in (-1, 4):
        with pytest.raises(RuntimeError):
            torch.topk(t, kk, 1)
        with pytest.raises(K.KilnError) as e:
            K.topk(k, kk, 1, True, True)
        assert e.value.status == K.ERR_ARG and "k = " in e.value.message
    for kk in (0, 4):
        with pytest.raises(RuntimeError):
            torch.kthvalue(t, kk, 1)
        with pytest.raises(K.KilnError) as e:
            K.kthvalue(k, kk, 1, False)
        assert e.value.status == K.ERR_ARG
    # NULL output pointers
    st_, outs = K.sort_raw(k, 0, False, True, True, False)
    assert st_ == K.ERR_ARG and outs[0] == 1  # untouched
    assert "indices" in K.last_error()
    K.clear_error()
    st_, outs = K.unique_raw(k, True, True, False, True, False, False)
    assert st_ == K.ERR_ARG and outs[0] == 1  # untouched
    K.clear_error()
