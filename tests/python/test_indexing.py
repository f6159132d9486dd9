"""Indexing vs NumPy on random shapes, dtypes and views (contiguous,
transposed, expanded with stride 0, sliced with stride 2 inside a larger
storage): index_select, gather, index_copy_, index_add_ (duplicate
indices accumulate: np.add.at), index_fill_ (negative indices wrap),
scatter_, scatter_value_, masked_select / masked_copy_ / masked_fill_
(broadcast masks and Torch7's same-count masks, BOOL and U8), nonzero,
cat, stack and repeat.

In-place ops are checked through the whole base storage: a write through
a sliced view must change only the elements the view names. Out-of-range
indices must raise ERR_INDEX from the call and leave the target unchanged.
"""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import kiln_ctypes as K
import oracle as O
from conftest import examples

DTYPES = [K.F32, K.F64, K.F16, K.BF16, K.I64, K.I32, K.U8, K.I8, K.BOOL]
ADD_DTYPES = [K.F32, K.F64, K.F16, K.I64, K.I32, K.U8, K.I8]


def draw_shape(data, lo=1, hi=3, size_lo=0, size_hi=4, label="shape"):
    nd = data.draw(st.integers(lo, hi), label=label + " ndim")
    return tuple(data.draw(st.integers(size_lo, size_hi), label=label)
                 for _ in range(nd))


def rng_of(data):
    return np.random.default_rng(data.draw(st.integers(0, 2**32 - 1),
                                           label="seed"))


def make_input(data, rng, d, shape, label, writable=False):
    """(numpy values, kiln tensor) of shape in a random layout. Writable
    tensors never use the overlapping (expanded) layout."""
    x = O.random_values(rng, d, shape, "small")
    layouts = ["contiguous", "transposed", "sliced"]
    if not writable:
        layouts.append("expanded")
    layout = data.draw(st.sampled_from(layouts), label=label + " layout")
    if layout == "transposed" and len(shape) >= 2:
        kt = K.permute(K.from_numpy(np.ascontiguousarray(x.T), d),
                       list(range(len(shape)))[::-1])
    elif layout == "expanded" and len(shape) >= 1 and shape[0] > 1:
        x = np.broadcast_to(x[:1], shape).copy()
        kt = K.expand(K.from_numpy(x[:1], d), list(shape))
    elif layout == "sliced" and len(shape) >= 1 and shape[-1] > 0:
        wide = np.repeat(x, 2, axis=-1)
        base = K.from_numpy(wide, d)
        strides = list(K.strides(base))[:-1] + [2]
        kt = K.as_strided(base, list(shape), strides, 1)
        x = wide[..., 1::2].copy()
    else:
        kt = K.from_numpy(x, d)
    return x, kt


def make_index(data, rng, shape, size, label, wrap=False):
    """(numpy int64, kiln I64 or I32) indices in [0, size) (or [-size,
    size) when wrap), possibly as a transposed or expanded view."""
    lo = -size if wrap else 0
    v = rng.integers(lo, max(size, 1), size=shape).astype(np.int64) \
        if size > 0 else np.zeros(shape, np.int64)
    dt = data.draw(st.sampled_from([K.I64, K.I64, K.I32]), label=label + " dtype")
    layout = data.draw(st.sampled_from(["contiguous", "transposed",
                                        "expanded"]), label=label + " layout")
    if layout == "transposed" and len(shape) >= 2:
        k = K.permute(K.from_numpy(np.ascontiguousarray(v.T).astype(
            K.NP_DTYPE[dt]), dt), list(range(len(shape)))[::-1])
    elif layout == "expanded" and len(shape) >= 1 and shape[0] > 1:
        v = np.broadcast_to(v[:1], shape).copy()
        k = K.expand(K.from_numpy(v[:1].astype(K.NP_DTYPE[dt]), dt),
                     list(shape))
    else:
        k = K.from_numpy(v.astype(K.NP_DTYPE[dt]), dt)
    return v, k


def same(got, want, d, what):
    O.assert_same(got.to_numpy(), want, d, what=what)


# ---------------------------------------------------------------- reads

@given(st.data())
@examples(80)
def test_index_select(data):
    rng = rng_of(data)
    d = data.draw(st.sampled_from(DTYPES), label="dtype")
    shape = draw_shape(data)
    dim = data.draw(st.integers(-len(shape), len(shape) - 1), label="dim")
    x, kt = make_input(data, rng, d, shape, "t")
    n = data.draw(st.integers(0, 5), label="n")
    idx, ki = make_index(data, rng, (n,), shape[dim], "index")
    if shape[dim] == 0 and n > 0:
        with pytest.raises(K.KilnError) as e:
            K.index_select(kt, dim, ki)
        assert e.value.status == K.ERR_INDEX
        return
    same(K.index_select(kt, dim, ki), np.take(x, idx, axis=dim), d,
         "index_select")


@given(st.data())
@examples(80)
def test_gather(data):
    rng = rng_of(data)
    d = data.draw(st.sampled_from(DTYPES), label="dtype")
    shape = draw_shape(data, size_lo=1)
    nd = len(shape)
    dim = data.draw(st.integers(-nd, nd - 1), label="dim") % nd
    x, kt = make_input(data, rng, d, shape, "t")
    ishape = tuple(data.draw(st.integers(0, 5 if k == dim else shape[k]),
                             label="index size") for k in range(nd))
    idx, ki = make_index(data, rng, ishape, shape[dim], "index")
    part = x[tuple(slice(None) if k == dim else slice(0, ishape[k])
                   for k in range(nd))]
    same(K.gather(kt, dim, ki), np.take_along_axis(part, idx, axis=dim), d,
         "gather")


@given(st.data())
@examples(40)
def test_gather_fused_with_neighbours(data):
    """A lazy producer feeds the gather and a lazy consumer reads it."""
    rng = rng_of(data)
    shape = draw_shape(data, lo=2, hi=2, size_lo=1)
    x, kt = make_input(data, rng, K.F32, shape, "t")
    idx, ki = make_index(data, rng, shape, shape[1], "index")
    g = K.add_scalar(K.gather(K.mul_scalar(kt, 2.0), 1, ki), 1.0)
    want = (np.take_along_axis(x * np.float32(2), idx, axis=1)
            + np.float32(1))
    same(g, want, K.F32, "2 * t gathered + 1")


# --------------------------------------------------------------- writes

def writable_target(data, rng, d, shape):
    """(numpy storage values, numpy view into them, kiln base, kiln view):
    the view is the whole base, its transpose, or every other element of
    a wider base (so writes must leave the rest alone)."""
    layout = data.draw(st.sampled_from(["contiguous", "transposed",
                                        "sliced"]), label="target layout")
    if layout == "sliced" and len(shape) >= 1:
        wide = O.random_values(rng, d, shape[:-1] + (2 * shape[-1],), "small")
        kb = K.from_numpy(wide, d)
        strides = list(K.strides(kb))[:-1] + [2]
        return wide, wide[..., 1::2], kb, K.as_strided(kb, list(shape),
                                                       strides, 1)
    if layout == "transposed" and len(shape) >= 2:
        base = O.random_values(rng, d, shape[::-1], "small")
        kb = K.from_numpy(base, d)
        return base, base.T, kb, K.permute(kb, list(range(len(shape)))[::-1])
    base = O.random_values(rng, d, shape, "small")
    kb = K.from_numpy(base, d)
    return base, base, kb, kb


@given(st.data())
@examples(80)
def test_index_copy_and_add(data):
    rng = rng_of(data)
    add = data.draw(st.booleans(), label="add")
    d = data.draw(st.sampled_from(ADD_DTYPES if add else DTYPES), label="dtype")
    shape = draw_shape(data, size_lo=1)
    nd = len(shape)
    dim = data.draw(st.integers(-nd, nd - 1), label="dim")
    base, view, kb, kt = writable_target(data, rng, d, shape)
    n = data.draw(st.integers(0, 6), label="n")  # duplicates likely
    idx, ki = make_index(data, rng, (n,), shape[dim], "index")
    sshape = list(shape)
    sshape[dim] = n
    src, ks = make_input(data, rng, d, tuple(sshape), "src")
    before = K.mul_scalar(kb, 1.0) if K.is_float(d) else K.clone(kb)
    tv, sv = np.moveaxis(view, dim, 0), np.moveaxis(src, dim, 0)
    if add and K.is_float(d):
        # Kiln sums the contributions in F64 (one chunk at these sizes:
        # in index order, from 0), adds them to t and rounds once
        K.index_add_(kt, dim, ki, ks)
        acc = np.zeros(tv.shape, np.float64)
        np.add.at(acc, idx, O.as_f64(sv, d))
        tv[...] = O.from_f64(O.as_f64(tv, d) + acc, d)
    elif add:
        K.index_add_(kt, dim, ki, ks)
        np.add.at(tv, idx, sv)
    else:
        K.index_copy_(kt, dim, ki, ks)
        for j in range(n):
            tv[idx[j]] = sv[j]
    O.assert_same(kb.to_numpy(), base, d, ulps=1 if d == K.F16 else 0,
                  what="index_add_" if add else "index_copy_")
    assert before.to_numpy().shape == base.shape  # earlier op still valid


@given(st.data())
@examples(60)
def test_index_fill(data):
    rng = rng_of(data)
    d = data.draw(st.sampled_from(DTYPES), label="dtype")
    shape = draw_shape(data, size_lo=1)
    dim = data.draw(st.integers(-len(shape), len(shape) - 1), label="dim")
    base, view, kb, kt = writable_target(data, rng, d, shape)
    idx, ki = make_index(data, rng, (data.draw(st.integers(0, 4)),),
                         shape[dim], "index", wrap=True)
    value = data.draw(st.sampled_from([0, 1, 3, -2]), label="value")
    K.index_fill_(kt, dim, ki, value)
    tv = np.moveaxis(view, dim, 0)
    for i in idx:
        tv[i] = O.from_f64(np.array(float(value)), d) if d != K.BOOL \
            else bool(value)
    same(kb, base, d, "index_fill_")


@given(st.data())
@examples(80)
def test_scatter(data):
    rng = rng_of(data)
    d = data.draw(st.sampled_from(DTYPES), label="dtype")
    shape = draw_shape(data, size_lo=1)
    nd = len(shape)
    dim = data.draw(st.integers(-nd, nd - 1), label="dim") % nd
    base, view, kb, kt = writable_target(data, rng, d, shape)
    ishape = tuple(data.draw(st.integers(0, 4 if k == dim else shape[k]),
                             label="index size") for k in range(nd))
    idx, ki = make_index(data, rng, ishape, shape[dim], "index")
    use_value = data.draw(st.booleans(), label="value?")
    if use_value:
        K.scatter_value_(kt, dim, ki, 5)
        src = np.full(ishape, 5, dtype=np.int64)
        src = O.from_f64(src.astype(np.float64), d) if d != K.BOOL \
            else np.ones(ishape, bool)
    else:
        sshape = tuple(s + data.draw(st.integers(0, 1), label="src extra")
                       for s in ishape)
        src, ks = make_input(data, rng, d, sshape, "src")
        K.scatter_(kt, dim, ki, ks)
    for pos in np.ndindex(*ishape):   # row-major: the last write wins
        at = list(pos)
        at[dim] = idx[pos]
        view[tuple(at)] = src[pos]
    same(kb, base, d, "scatter_value_" if use_value else "scatter_")


@given(st.data())
@examples(30)
def test_bad_index_leaves_target(data):
    rng = rng_of(data)
    shape = draw_shape(data, lo=2, hi=2, size_lo=1)
    base, view, kb, kt = writable_target(data, rng, K.F32, shape)
    n = shape[1]
    bad = data.draw(st.sampled_from([n, n + 3, -1, -n - 1]), label="bad")
    ki = K.from_numpy(np.array([0, bad], np.int64))
    src = K.ones(K.F32, [shape[0], 2])
    op = data.draw(st.sampled_from(["index_add_", "index_copy_", "index_fill_",
                                    "index_select"]), label="op")
    if op == "index_fill_" and -n <= bad < 0:
        return  # a valid, wrapped index
    with pytest.raises(K.KilnError) as e:
        if op == "index_fill_":
            K.index_fill_(kt, 1, ki, 1)
        elif op == "index_select":
            K.index_select(kt, 1, ki)
        else:
            getattr(K, op)(kt, 1, ki, src)
    assert e.value.status == K.ERR_INDEX
    assert (f"kiln_{op}: index {bad} is out of range for dim 1 of size {n}"
            in e.value.message)
    same(kb, base, K.F32, "target after a rejected write")


# ---------------------------------------------------------------- masks

def draw_mask(data, rng, shape, label="mask"):
    """(numpy bool of the mask's own sizes, kiln BOOL/U8): sizes that equal
    shape, broadcast to it, or (Torch7) hold its element count."""
    kind = data.draw(st.sampled_from(["same", "broadcast", "torch7"]),
                     label=label + " kind")
    mshape = shape
    if kind == "broadcast" and len(shape) >= 1:
        mshape = tuple(1 if data.draw(st.booleans()) else s
                       for s in shape)[data.draw(st.integers(0, len(shape))):]
    elif kind == "torch7":
        mshape = (int(np.prod(shape)),)
    m = rng.random(mshape) < 0.5
    dt = data.draw(st.sampled_from([K.BOOL, K.U8]), label=label + " dtype")
    return m, K.from_numpy(m.astype(K.NP_DTYPE[dt]), dt)


def broadcast_or_none(a, b):
    try:
        return np.broadcast_shapes(a, b)
    except ValueError:
        return None


def mask_for_write(m, shape):
    """Kiln's rule for in-place masks: broadcast to shape, else Torch7."""
    if broadcast_or_none(m.shape, shape) == tuple(shape):
        return np.broadcast_to(m, shape)
    return m.reshape(shape)


@given(st.data())
@examples(80)
def test_masked_select_fill_copy(data):
    rng = rng_of(data)
    d = data.draw(st.sampled_from(DTYPES), label="dtype")
    shape = draw_shape(data, lo=0)
    m, km = draw_mask(data, rng, shape)
    x, kt = make_input(data, rng, d, shape, "t")
    both = broadcast_or_none(shape, m.shape)  # PyTorch first, then Torch7
    want = np.broadcast_to(x, both)[np.broadcast_to(m, both)] \
        if both is not None else x[m.reshape(shape)]
    same(K.masked_select(kt, km), want, d, "masked_select")
    base, view, kb, kw = writable_target(data, rng, d, shape)
    mw = mask_for_write(m, shape)
    if data.draw(st.booleans(), label="fill?"):
        K.masked_fill_(kw, km, 2)
        view[mw] = O.from_f64(np.array(2.0), d) if d != K.BOOL else True
        same(kb, base, d, "masked_fill_")
    else:
        k = int(mw.sum())
        src, ks = make_input(data, rng, d,
                             (k + data.draw(st.integers(0, 2)),), "src")
        K.masked_copy_(kw, km, ks)
        view[mw] = src[:k]
        same(kb, base, d, "masked_copy_")


@given(st.data())
@examples(40)
def test_masked_select_broadcasts_both(data):
    """PyTorch: t [a, 1] and mask [b] select from the [a, b] broadcast."""
    rng = rng_of(data)
    a, b = data.draw(st.integers(1, 4)), data.draw(st.integers(2, 4))
    x, kt = make_input(data, rng, K.I32, (a, 1), "t")
    m = rng.random(b) < 0.5
    got = K.masked_select(kt, K.from_numpy(m))
    same(got, np.broadcast_to(x, (a, b))[np.broadcast_to(m, (a, b))], K.I32,
         "masked_select broadcast")


@given(st.data())
@examples(60)
def test_nonzero(data):
    rng = rng_of(data)
    d = data.draw(st.sampled_from(DTYPES), label="dtype")
    shape = draw_shape(data, lo=0)
    x, kt = make_input(data, rng, d, shape, "t")
    if K.is_float(d):
        x64 = O.as_f64(x, d)
        want = np.argwhere(x64 != 0) if x.ndim else \
            np.zeros((int(x64 != 0), 0), np.int64)
    else:
        want = np.argwhere(x != 0) if x.ndim else \
            np.zeros((int(x != 0), 0), np.int64)
    want = want.astype(np.int64).reshape(want.shape[0], len(shape))
    same(K.nonzero(kt), want, K.I64, "nonzero")


# ---------------------------------------------------------------- joins

@given(st.data())
@examples(80)
def test_cat_and_stack(data):
    rng = rng_of(data)
    shape = draw_shape(data)
    nd = len(shape)
    n = data.draw(st.integers(1, 4), label="n")
    stack = data.draw(st.booleans(), label="stack")
    dim = data.draw(st.integers(-nd - stack, nd - 1 + stack), label="dim")
    xs, ks, dts = [], [], []
    for i in range(n):
        s = list(shape)
        if not stack:
            s[dim] = data.draw(st.integers(0, 3), label="cat size")
        d = data.draw(st.sampled_from([K.F32, K.F32, K.I32, K.F64, K.U8]),
                      label="dtype")
        x, k = make_input(data, rng, d, tuple(s), f"t{i}")
        xs.append(x), ks.append(k), dts.append(d)
    rd = dts[0]
    for d in dts[1:]:
        rd = O.promote(rd, d)
    want = (np.stack if stack else np.concatenate)(
        [O.convert(x, d, rd) for x, d in zip(xs, dts)], axis=dim)
    got = (K.stack if stack else K.cat)(ks, dim)
    assert K.dtype_of(got) == rd
    same(got, want, rd, "stack" if stack else "cat")


@given(st.data())
@examples(60)
def test_repeat(data):
    rng = rng_of(data)
    d = data.draw(st.sampled_from(DTYPES), label="dtype")
    shape = draw_shape(data, lo=0)
    x, kt = make_input(data, rng, d, shape, "t")
    extra = data.draw(st.integers(0, 2), label="extra dims")
    reps = [data.draw(st.integers(0, 3), label="rep")
            for _ in range(len(shape) + extra)]
    same(K.repeat(kt, reps), np.tile(x, reps), d, "repeat")
