"""Views, storage sharing, in-place writes and program order, against NumPy.

Each example builds one storage (a 1-d NumPy `base` and the same values in
Kiln), derives a random chain of views from it — narrow, select, slice with
a step, transpose, t, permute, unfold, expand, as_strided, squeeze,
unsqueeze, view — mirroring each with NumPy's own view functions on `base`
(np.lib.stride_tricks.as_strided for unfold, expand and as_strided), then
runs a random program of in-place writes through those views (fill_, zero_,
copy_, set) interleaved with recorded ops (clone, add) and forced reads.
Finally every tensor is read and compared with its NumPy twin: the views
see every write; an op sees exactly the writes recorded before it.
"""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy.lib.stride_tricks import as_strided

import kiln_ctypes as K
import oracle as O
from conftest import examples

VIEW_DTYPES = [K.F32, K.I32, K.I64, K.U8, K.BOOL, K.F16, K.BF16, K.F64,
               K.I8, K.I16]


def np_as_strided(arr, shape, strides):
    """NumPy view of arr's first element with element strides."""
    it = arr.itemsize
    return as_strided(arr, shape=tuple(shape),
                      strides=tuple(s * it for s in strides),
                      writeable=True)


def elem_strides(arr):
    return tuple(s // arr.itemsize for s in arr.strides)


def base_values(dtype, n, rng):
    """Distinct-looking values so a wrong element shows up."""
    if dtype == K.BOOL:
        return rng.integers(0, 2, n).astype(np.bool_)
    v = (np.arange(n) % 120) + 1
    if dtype in (K.I8, K.I16, K.I32, K.I64) and n:
        v = v * np.where(rng.random(n) < 0.5, -1, 1)
    if dtype == K.BF16:
        return K.f32_to_bf16_bits(v.astype(np.float32))
    return v.astype(K.NP_DTYPE[dtype])


def shape_st(max_dims=4, max_size=4, min_dims=0):
    return st.lists(st.integers(0, max_size), min_size=min_dims,
                    max_size=max_dims).map(tuple)


class Twin:
    """A Kiln tensor and the NumPy view (of the same base) it must equal."""

    def __init__(self, kt, arr, how):
        self.kt, self.arr, self.how = kt, arr, how

    def check(self, dtype, what=""):
        assert self.kt.shape == self.arr.shape, (self.how, self.kt.shape,
                                                 self.arr.shape)
        O.assert_same(self.kt.to_numpy(), self.arr, dtype,
                      what=f"{what} {self.how}")


def draw_view(data, tw):
    """Applies one random view op to twin tw; returns the new twin or None
    if the drawn op does not apply to this shape."""
    kt, arr = tw.kt, tw.arr
    nd = arr.ndim
    shape = arr.shape
    ops = ["as_strided", "permute", "expand", "unsqueeze", "squeeze", "view"]
    if nd >= 1:
        ops += ["narrow", "select", "slice", "transpose", "unfold",
                "squeeze_dim", "narrow", "slice"]
    if nd <= 2:
        ops.append("t")
    op = data.draw(st.sampled_from(ops), label="view op")
    d = data.draw(st.integers(0, nd - 1), label="dim") if nd else 0
    dneg = d - nd if data.draw(st.booleans(), label="negative dim") else d
    n = shape[d] if nd else 1
    idx = [slice(None)] * nd
    if op == "narrow":
        start = data.draw(st.integers(0, n), label="start")
        length = data.draw(st.integers(0, n - start), label="length")
        idx[d] = slice(start, start + length)
        return Twin(K.narrow(kt, dneg, start, length), arr[tuple(idx)],
                    f"{tw.how}.narrow({dneg},{start},{length})")
    if op == "select":
        if n == 0:
            return None
        i = data.draw(st.integers(-n, n - 1), label="index")
        idx[d] = i
        return Twin(K.select(kt, dneg, i), arr[tuple(idx) + (Ellipsis,)],
                    f"{tw.how}.select({dneg},{i})")
    if op == "slice":
        a = data.draw(st.integers(-n - 2, n + 2), label="start")
        b = data.draw(st.integers(-n - 2, n + 2), label="end")
        s = data.draw(st.integers(1, 3), label="step")
        idx[d] = slice(a, b, s)
        return Twin(K.slice(kt, dneg, a, b, s), arr[tuple(idx)],
                    f"{tw.how}[{dneg}: {a}:{b}:{s}]")
    if op == "transpose":
        d1 = data.draw(st.integers(0, nd - 1), label="dim1")
        return Twin(K.transpose(kt, dneg, d1), np.swapaxes(arr, d, d1),
                    f"{tw.how}.transpose({dneg},{d1})")
    if op == "t":
        return Twin(K.t(kt), arr.T, f"{tw.how}.t()")
    if op == "permute":
        perm = data.draw(st.permutations(list(range(nd))), label="perm")
        perm_arg = [p - nd if data.draw(st.booleans(), label="neg") else p
                    for p in perm] if nd else []
        return Twin(K.permute(kt, perm_arg), np.transpose(arr, perm),
                    f"{tw.how}.permute({perm_arg})")
    if op == "unfold":
        if n == 0:
            return None
        size = data.draw(st.integers(1, n), label="size")
        step = data.draw(st.integers(1, 3), label="step")
        st_ = elem_strides(arr)
        nshape = list(shape) + [size]
        nshape[d] = (n - size) // step + 1
        nstr = list(st_) + [st_[d]]
        nstr[d] = st_[d] * step
        return Twin(K.unfold(kt, dneg, size, step),
                    np_as_strided(arr, nshape, nstr),
                    f"{tw.how}.unfold({dneg},{size},{step})")
    if op == "expand":
        lead = data.draw(st.lists(st.integers(0, 3), max_size=2),
                         label="new leading sizes")
        if nd + len(lead) > 5:
            return None
        sizes_arg, nshape, nstr = list(lead), list(lead), [0] * len(lead)
        for k, (sz, sd) in enumerate(zip(shape, elem_strides(arr))):
            if sz == 1:
                new = data.draw(st.sampled_from([1, 2, 3, 0, -1]),
                                label="expanded size")
            else:
                new = data.draw(st.sampled_from([sz, -1]), label="kept size")
            sizes_arg.append(new)
            real = sz if new == -1 else new
            nshape.append(real)
            nstr.append(sd if real == sz else 0)
        return Twin(K.expand(kt, sizes_arg), np_as_strided(arr, nshape, nstr),
                    f"{tw.how}.expand({sizes_arg})")
    if op == "unsqueeze":
        u = data.draw(st.integers(-nd - 1, nd), label="unsqueeze dim")
        if nd >= 5:
            return None
        return Twin(K.unsqueeze(kt, u), np.expand_dims(arr, u),
                    f"{tw.how}.unsqueeze({u})")
    if op == "squeeze":
        return Twin(K.squeeze(kt), np.squeeze(arr), f"{tw.how}.squeeze()")
    if op == "squeeze_dim":
        want = np.squeeze(arr, axis=d) if n == 1 else arr[...]
        return Twin(K.squeeze_dim(kt, dneg), want,
                    f"{tw.how}.squeeze({dneg})")
    if op == "as_strided":
        return None  # drawn from the base, see draw_as_strided
    if op == "view":
        new = draw_reshape(data, shape)
        v = arr.view()
        try:
            v.shape = tuple(abs(x) if x != -1 else -1 for x in new)
        except (AttributeError, ValueError):
            v = None
        if v is None:
            if arr.size == 0:
                return None      # NumPy and Torch differ for empty views
            with pytest.raises(K.KilnError) as e:
                K.view(kt, new)
            assert e.value.status == K.ERR_SHAPE, str(e.value)
            assert "kiln_view" in e.value.message, e.value.message
            return None
        return Twin(K.view(kt, new), v, f"{tw.how}.view({new})")
    raise AssertionError(op)


def draw_reshape(data, shape):
    """A new shape with the same element count: merge neighbours, split a
    dim in two, add or drop 1s, and maybe one -1."""
    dims = list(shape)
    for _ in range(data.draw(st.integers(0, 3), label="reshape steps")):
        kind = data.draw(st.sampled_from(["merge", "split", "one", "drop"]),
                         label="reshape kind")
        if kind == "merge" and len(dims) >= 2:
            k = data.draw(st.integers(0, len(dims) - 2), label="merge at")
            dims[k:k + 2] = [dims[k] * dims[k + 1]]
        elif kind == "split" and dims:
            k = data.draw(st.integers(0, len(dims) - 1), label="split at")
            f = [x for x in (2, 3) if dims[k] % x == 0 and dims[k] > 0]
            if f:
                dims[k:k + 1] = [f[0], dims[k] // f[0]]
        elif kind == "one" and len(dims) < 5:
            k = data.draw(st.integers(0, len(dims)), label="one at")
            dims.insert(k, 1)
        elif kind == "drop" and 1 in dims:
            dims.remove(1)
    if dims and 0 not in dims and data.draw(st.booleans(), label="use -1"):
        k = data.draw(st.integers(0, len(dims) - 1), label="-1 at")
        dims[k] = -1
    return dims


def draw_as_strided(data, kbase, base, nbase):
    nd = data.draw(st.integers(0, 3), label="as_strided ndim")
    shape = [data.draw(st.integers(0, 3), label="size") for _ in range(nd)]
    strides = [data.draw(st.integers(0, 3), label="stride")
               for _ in range(nd)]
    numel = int(np.prod(shape)) if shape else 1
    reach = sum((s - 1) * t for s, t in zip(shape, strides)) if numel else 0
    if numel and reach + 1 > nbase:
        return None
    hi = nbase - 1 - reach if numel else nbase
    off = data.draw(st.integers(0, max(hi, 0)), label="offset")
    arr = np_as_strided(base[off:], shape, strides)
    return Twin(K.as_strided(kbase, shape, strides, off), arr,
                f"base.as_strided({shape},{strides},{off})")


def has_overlap(arr, base):
    """True if two elements of view arr alias the same base element."""
    if arr.size <= 1:
        return False
    start = (arr.__array_interface__["data"][0] -
             base.__array_interface__["data"][0]) // base.itemsize
    offs = np.full(arr.shape, start, dtype=np.int64)
    for k, s in enumerate(elem_strides(arr)):
        shape = [1] * arr.ndim
        shape[k] = arr.shape[k]
        offs = offs + (np.arange(arr.shape[k]) * s).reshape(shape)
    return len(np.unique(offs)) != arr.size


def write_value(data, dtype):
    """A value every dtype holds exactly (so the cast is unambiguous)."""
    if dtype == K.BOOL:
        return float(data.draw(st.integers(0, 1), label="value"))
    if dtype == K.U8:
        return float(data.draw(st.integers(0, 255), label="value"))
    if dtype == K.I8:
        return float(data.draw(st.integers(-128, 127), label="value"))
    return float(data.draw(st.integers(-100, 100), label="value")) / \
        data.draw(st.sampled_from([1, 2, 4]), label="denominator") \
        if K.is_float(dtype) else float(data.draw(st.integers(-100, 100),
                                                  label="value"))


def np_value(v, dtype):
    return O.convert(np.float64(v), K.F64, dtype)


def build_views(data, dtype):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1),
                                          label="seed"))
    shape = data.draw(shape_st(4, 4), label="base shape")
    n = int(np.prod(shape)) if shape else 1
    base = base_values(dtype, n, rng)
    kbase = K.from_numpy(base, dtype)
    twins = [Twin(kbase, base, "base"),
             Twin(K.view(kbase, list(shape)), base.reshape(shape),
                  f"base.view({list(shape)})")]
    for _ in range(data.draw(st.integers(1, 5), label="chain length")):
        if data.draw(st.integers(0, 5), label="as_strided?") == 0:
            tw = draw_as_strided(data, kbase, base, n)
        else:
            src = data.draw(st.sampled_from(twins[1:]), label="from view")
            tw = draw_view(data, src)
        if tw is not None:
            twins.append(tw)
    return rng, base, kbase, twins


@pytest.mark.parametrize("dtype", VIEW_DTYPES,
                         ids=[K.DTYPE_NAMES[d] for d in VIEW_DTYPES])
@examples(200)
@given(data=st.data())
def test_view_chains_read(dtype, data):
    """Every view in a random chain reads the same values as NumPy's view,
    with the same sizes and (for these pure views) the same strides."""
    _, base, kbase, twins = build_views(data, dtype)
    order = data.draw(st.permutations(range(len(twins))), label="read order")
    for i in order:
        tw = twins[i]
        tw.check(dtype, "read")
        st_k = [s for s, z in zip(tw.kt.stride_tuple, tw.kt.shape) if z > 1]
        st_n = [s for s, z in zip(elem_strides(tw.arr), tw.arr.shape)
                if z > 1]
        if tw.arr.size:
            assert st_k == st_n, (tw.how, tw.kt.stride_tuple,
                                  elem_strides(tw.arr))
        assert K.storage_of(tw.kt) == K.storage_of(kbase), tw.how


@pytest.mark.parametrize("dtype", [K.F32, K.I64, K.U8, K.BOOL, K.BF16,
                                   K.F16, K.I16],
                         ids=["f32", "i64", "u8", "bool", "bf16", "f16",
                              "i16"])
@examples(300)
@given(data=st.data())
def test_inplace_writes_through_views(dtype, data):
    """A random program of writes through views and recorded ops; at the
    end every tensor sharing the storage and every op result is read."""
    rng, base, kbase, twins = build_views(data, dtype)
    results = []   # (kiln tensor, numpy snapshot, description)
    for step in range(data.draw(st.integers(1, 6), label="program length")):
        tw = data.draw(st.sampled_from(twins), label="target")
        what = data.draw(st.sampled_from(
            ["fill_", "zero_", "copy_", "copy_view", "set", "clone", "add",
             "chain", "sum", "write_result", "realize", "read"]),
            label="action")
        if what == "fill_":
            v = write_value(data, dtype)
            K.fill_(tw.kt, v)
            tw.arr[...] = np_value(v, dtype)
        elif what == "zero_":
            K.zero_(tw.kt)
            tw.arr[...] = 0
        elif what in ("copy_", "copy_view"):
            if has_overlap(tw.arr, base):
                continue   # which write wins is unspecified
            if what == "copy_":
                sdt = data.draw(st.sampled_from([dtype, K.F32, K.I32,
                                                 K.BOOL]), label="src dtype")
                bshape = list(tw.arr.shape)
                how = data.draw(st.sampled_from(["same", "broadcast",
                                                 "flat"]), label="src shape")
                if how == "broadcast" and bshape:
                    bshape[data.draw(st.integers(0, len(bshape) - 1))] = 1
                elif how == "flat":
                    bshape = [int(np.prod(bshape))]
                sval = O.random_values(rng, sdt, bshape, kind="small")
                src = K.from_numpy(sval, sdt)
                conv = O.convert(sval, sdt, dtype)
            else:
                cands = [t for t in twins if t.arr.size == tw.arr.size]
                other = data.draw(st.sampled_from(cands), label="src view")
                src = other.kt
                conv = other.arr.copy()
            K.copy_(tw.kt, src)
            try:
                tw.arr[...] = np.broadcast_to(conv, tw.arr.shape)
            except ValueError:
                tw.arr[...] = conv.reshape(tw.arr.shape)
        elif what == "set":
            if tw.arr.size == 0:
                continue
            index = [data.draw(st.integers(0, s - 1), label="index")
                     for s in tw.arr.shape]
            v = write_value(data, dtype)
            K.set(tw.kt, index, v)
            tw.arr[tuple(index)] = np_value(v, dtype)
        elif what == "clone":
            results.append((K.clone(tw.kt), tw.arr.copy(),
                            f"clone of {tw.how} at step {step}"))
        elif what == "add":
            r = K.add(tw.kt, tw.kt)
            a = tw.arr
            if dtype == K.BOOL:
                want = a | a
            elif dtype == K.BF16:
                want = O.from_f32(O.as_f32(a, dtype) * 2, dtype)
            else:
                with np.errstate(over="ignore"):
                    want = a + a
            results.append((r, want.copy(), f"add of {tw.how} at {step}"))
        elif what == "chain":
            # a fusable chain: x * 3 + x (values stay exact in every dtype)
            r = K.add(K.mul_scalar(tw.kt, 3.0), tw.kt)
            a = tw.arr
            if dtype == K.BOOL:
                want = a.astype(np.int64) * 4          # bool * 3 is I64
            elif dtype in (K.BF16, K.F16):
                want = O.from_f32(O.as_f32(a, dtype) * 4, dtype)
            else:
                with np.errstate(over="ignore"):
                    want = (a.astype(np.int64) * 4).astype(a.dtype) \
                        if K.is_int(dtype) else a * 4
            results.append((r, want.copy(), f"x*3+x of {tw.how} at {step}"))
        elif what == "sum":
            if dtype in (K.F16, K.BF16):
                continue        # not exact in the half types
            r = K.sum(tw.kt, [], False)
            a = tw.arr
            want = np.sum(a.astype(np.int64)) if not K.is_float(dtype) \
                else np.sum(a.astype(np.float64)).astype(a.dtype)
            results.append((r, np.asarray(want), f"sum of {tw.how} at {step}"))
        elif what == "write_result":
            # write into an op result that may still be pending
            if not results:
                continue
            k = data.draw(st.integers(0, len(results) - 1), label="result")
            kt, want, how = results[k]
            if want.ndim == 0 or want.shape[0] == 0:
                continue
            i = data.draw(st.integers(0, want.shape[0] - 1), label="row")
            rd = kt.dtype
            v = float(data.draw(st.integers(0, 100), label="value"))
            K.fill_(K.select(kt, 0, i), v)
            want[i] = O.convert(np.float64(v), K.F64, rd)
            results[k] = (kt, want, how + f", row {i} filled at {step}")
        elif what == "realize":
            K.realize(tw.kt)
        else:
            tw.check(dtype, f"mid-program read at step {step}:")
    order = data.draw(st.permutations(range(len(twins) + len(results))),
                      label="final read order")
    for i in order:
        if i < len(twins):
            twins[i].check(dtype, "final read:")
        else:
            kt, want, how = results[i - len(twins)]
            O.assert_same(kt.to_numpy(), want, kt.dtype, what=how)


def test_design_example():
    """The example of DESIGN.md: y is recorded before the write."""
    x = K.zeros(K.F32, [5])
    n = K.narrow(x, 0, 1, 3)
    y = K.add(x, x)
    K.fill_(n, 1)
    z = K.mul_scalar(x, 2)
    assert list(x.to_numpy()) == [0, 1, 1, 1, 0]
    assert list(n.to_numpy()) == [1, 1, 1]
    assert list(y.to_numpy()) == [0] * 5
    assert list(z.to_numpy()) == [0, 2, 2, 2, 0]


def test_program_order_chain():
    """Each op sees exactly the writes before it, across many versions."""
    x = K.zeros(K.I32, [4])
    snaps = []
    for i in range(6):
        K.fill_(K.narrow(x, 0, i % 4, 1), i + 1)
        snaps.append(K.clone(x))
    want = np.zeros(4, np.int32)
    for i, s in enumerate(snaps):
        want[i % 4] = i + 1
        assert list(s.to_numpy()) == list(want), i


def test_write_after_force_and_data_pointer():
    x = K.from_numpy(np.arange(6, dtype=np.float32))
    K.realize(x)
    K.set(x, [2], 40.0)
    assert K.get(x, [2]) == 40.0
    assert K.item(K.select(x, 0, 2)) == 40.0


def test_storage_and_from_storage():
    s = K.storage_new(K.I32, 10)
    assert K.storage_numel(s) == 10 and K.storage_dtype(s) == K.I32
    a = K.tensor_from_storage(s, 2, [2, 3], None)
    b = K.tensor_from_storage(s, 0, [5], [2])
    assert a.shape == (2, 3) and a.stride_tuple == (3, 1) and a.offset == 2
    K.fill_(a, 7)
    assert list(b.to_numpy()) == [0, 7, 7, 7, 0]   # elements 0 2 4 6 8
    assert K.storage_of(a) == K.storage_of(b)
    with pytest.raises(K.KilnError) as e:
        K.tensor_from_storage(s, 5, [3], [3])
    assert "kiln_tensor_from_storage" in e.value.message


def test_set_and_resize():
    a = K.from_numpy(np.arange(4, dtype=np.int64))
    b = K.zeros(K.I64, [2, 2])
    K.set_(b, a)
    assert K.is_set_to(a, b)
    K.fill_(K.narrow(b, 0, 0, 1), 9)
    assert list(a.to_numpy()) == [9, 1, 2, 3]
    c = K.from_numpy(np.arange(3, dtype=np.float32))
    K.resize_(c, [2, 3])
    assert c.shape == (2, 3) and K.is_contiguous(c)
    assert list(c.to_numpy().ravel()) == [0, 1, 2, 0, 0, 0]


@examples(160)
@given(data=st.data())
def test_reshape_flatten_contiguous(data):
    """reshape/flatten give NumPy's values; they are views (same storage)
    exactly when kiln_view succeeds; contiguous/clone copy values."""
    rng, base, kbase, twins = build_views(data, K.I32)
    tw = data.draw(st.sampled_from(twins), label="view")
    new = draw_reshape(data, tw.arr.shape)
    r = K.reshape(tw.kt, new)
    O.assert_same(r.to_numpy(), tw.arr.reshape(new), K.I32, what="reshape")
    try:
        K.view(tw.kt, new)
        is_view = True
    except K.KilnError:
        is_view = False
    if is_view:
        assert K.storage_of(r) == K.storage_of(tw.kt)
    if tw.arr.ndim:
        s = data.draw(st.integers(0, tw.arr.ndim - 1), label="start_dim")
        e = data.draw(st.integers(s, tw.arr.ndim - 1), label="end_dim")
        f = K.flatten(tw.kt, s, e)
        sh = tw.arr.shape
        new = sh[:s] + (int(np.prod(sh[s:e + 1])),) + sh[e + 1:]
        O.assert_same(f.to_numpy(), tw.arr.reshape(new), K.I32,
                      what="flatten")
    c = K.contiguous(tw.kt)
    assert K.is_contiguous(c)
    O.assert_same(c.to_numpy(), tw.arr, K.I32, what="contiguous")
    cl = K.clone(tw.kt)
    before = tw.arr.copy()
    K.fill_(tw.kt, 5)
    O.assert_same(cl.to_numpy(), before, K.I32,
                  what="clone after a write to its source")
    tw.arr[...] = 5
    O.assert_same(tw.kt.to_numpy(), tw.arr, K.I32, what="after fill_")


@examples(80)
@given(data=st.data())
def test_split_chunk(data):
    shape = data.draw(shape_st(3, 5, min_dims=1))
    arr = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
    kt = K.from_numpy(arr)
    d = data.draw(st.integers(0, len(shape) - 1))
    size = data.draw(st.integers(1, 4))
    parts = K.split(kt, size, d)
    n = shape[d]
    want = [np.take(arr, range(i, min(i + size, n)), axis=d)
            for i in range(0, n, size)] or [arr]
    assert len(parts) == len(want)
    for p, w in zip(parts, want):
        O.assert_same(p.to_numpy(), w, K.I64, what="split")
        assert K.storage_of(p) == K.storage_of(kt)
    c = data.draw(st.integers(1, 4))
    chunks = K.chunk(kt, c, d)
    csize = -(-n // c) if n else 0
    # Torch: an empty dim gives c empty chunks
    wantc = [np.take(arr, range(i, min(i + csize, n)), axis=d)
             for i in range(0, n, csize)] if csize else [arr] * c
    assert len(chunks) == len(wantc), (shape, d, c)
    for p, w in zip(chunks, wantc):
        O.assert_same(p.to_numpy(), w, K.I64, what="chunk")


def test_expand_as_view_as():
    a = K.from_numpy(np.arange(3, dtype=np.int16).reshape(3, 1))
    other = K.zeros(K.F32, [2, 3, 4])
    e = K.expand_as(a, other)
    assert e.shape == (2, 3, 4) and e.stride_tuple == (0, 1, 0)
    O.assert_same(e.to_numpy(), np.broadcast_to(np.arange(3, dtype=np.int16)
                                                .reshape(3, 1), (2, 3, 4)),
                  K.I16, what="expand_as")
    v = K.view_as(K.from_numpy(np.arange(24, dtype=np.int16)), other)
    assert v.shape == (2, 3, 4)
    with pytest.raises(K.KilnError) as err:
        K.view_as(K.t(K.zeros(K.F32, [4, 6])), K.zeros(K.I8, [24]))
    assert err.value.status == K.ERR_SHAPE
    assert "kiln_reshape" in err.value.message or \
        "kiln_contiguous" in err.value.message, err.value.message
