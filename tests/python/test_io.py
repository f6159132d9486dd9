"""Files and element callbacks against independent implementations.

.npy: NumPy reads the files Kiln writes (np.load) and Kiln reads the files
NumPy writes (np.save, np.lib.format.write_array for versions 2.0/3.0), for
every dtype both have, with random raw bytes (so NaN payloads, -0.0 and
subnormals are covered bit for bit), random shapes including 0-d and
empty ones, strided, transposed and overlapping (stride 0) views, fortran
order and big-endian files.

safetensors: files Kiln writes are parsed here with struct + json only
(header size, key order, dtype strings, shapes, offsets covering the data
section, raw bytes); files written here by hand are read by Kiln.

Callbacks: kiln_apply_/kiln_map_/kiln_map2_ with Python callbacks through
ctypes CFUNCTYPE (a counter, overlapping views, a transposed src, src over
t's own storage) against a plain NumPy loop over the same views in
row-major order.
"""
import json
import os
import struct

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy.lib.stride_tricks import as_strided

import kiln_ctypes as K
from conftest import examples

NPY_DTYPES = [K.BOOL, K.U8, K.I8, K.I16, K.I32, K.I64, K.F16, K.F32, K.F64]
ST_NAMES = {K.BOOL: "BOOL", K.U8: "U8", K.I8: "I8", K.I16: "I16",
            K.I32: "I32", K.I64: "I64", K.F16: "F16", K.BF16: "BF16",
            K.F32: "F32", K.F64: "F64"}


def raw_values(rng, d, n):
    """n elements of dtype d (BF16: uint16 bits) from random bytes: every
    bit pattern, NaN payloads included. BOOL: 0/1."""
    if d == K.BOOL:
        return rng.integers(0, 2, n).astype(np.bool_)
    dt = K.NP_DTYPE[d]
    return rng.integers(0, 256, n * dt.itemsize, dtype=np.uint8).view(dt)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """One directory for the module (hypothesis tests cannot take the
    function-scoped tmp_path)."""
    return tmp_path_factory.mktemp("io")


def native(a):
    """The same values with native (little-endian) byte order, bits kept."""
    if a.dtype.byteorder == ">":
        return a.byteswap().view(a.dtype.newbyteorder("<"))
    return a


def same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape, (a.shape, b.shape)
    assert a.dtype.itemsize == b.dtype.itemsize
    assert a.tobytes(order="C") == b.tobytes(order="C")


def np_view(base, sizes, strides, offset):
    """NumPy view of `base` with element sizes/strides/offset."""
    it = base.itemsize
    return as_strided(base[offset:], shape=tuple(sizes),
                      strides=tuple(s * it for s in strides), writeable=True)


@st.composite
def strided_view(draw, max_dims=3, max_size=4):
    """(sizes, strides, offset, base_numel) of a random view, strides 0..3
    (0: overlapping/expanded) in any order (transposes)."""
    nd = draw(st.integers(0, max_dims))
    sizes = [draw(st.integers(0, max_size)) for _ in range(nd)]
    strides = [draw(st.integers(0, 3)) for _ in range(nd)]
    offset = draw(st.integers(0, 3))
    extent = sum((s - 1) * t for s, t in zip(sizes, strides) if s > 0)
    return sizes, strides, offset, offset + extent + 1 + draw(
        st.integers(0, 2))


# ------------------------------------------------------------------ npy

@examples(80)
@given(d=st.sampled_from(NPY_DTYPES), view=strided_view(),
       seed=st.integers(0, 2**32 - 1))
def test_npy_numpy_reads_kiln(workdir, d, view, seed):
    sizes, strides, offset, n = view
    rng = np.random.default_rng(seed)
    base = raw_values(rng, d, n)
    kv = K.from_numpy(base, d).as_strided(sizes, strides, offset)
    path = str(workdir / "k.npy")
    K.save_npy(kv, path)
    got = np.load(path)
    assert got.dtype == K.NP_DTYPE[d]
    assert not np.isfortran(got) or got.ndim < 2
    same_bits(got, np_view(base, sizes, strides, offset))
    # and back: bit-exact round trip
    back = K.load_npy(path)
    assert back.shape == tuple(sizes) and back.dtype == d
    same_bits(back.to_numpy(), got)


@examples(60)
@given(d=st.sampled_from(NPY_DTYPES),
       shape=st.lists(st.integers(0, 4), max_size=4).map(tuple),
       order=st.sampled_from(["C", "F", "big", "strided"]),
       version=st.sampled_from([None, (1, 0), (2, 0), (3, 0)]),
       seed=st.integers(0, 2**32 - 1))
def test_npy_kiln_reads_numpy(workdir, d, shape, order, version, seed):
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape, dtype=np.int64))
    a = raw_values(rng, d, n).reshape(shape)
    if order == "F":
        a = np.asfortranarray(a)
    elif order == "big":
        a = a.byteswap().view(a.dtype.newbyteorder(">"))
    elif order == "strided" and a.ndim:
        a = np.swapaxes(raw_values(rng, d, 2 * n).reshape(shape + (2,))
                        [..., 1], 0, -1)
    path = str(workdir / "n.npy")
    if version is None:
        np.save(path, a)
    else:
        with open(path, "wb") as f:
            np.lib.format.write_array(f, a, version=version)
    t = K.load_npy(path)
    assert t.shape == a.shape and t.dtype == d
    if order == "F" and np.isfortran(a):
        # fortran files load as column-major views
        assert t.stride_tuple[0] == 1
    same_bits(t.to_numpy(), native(a))


def test_npy_transposed_and_fortran_values(tmp_path):
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    path = str(tmp_path / "f.npy")
    np.save(path, np.asfortranarray(a))
    t = K.load_npy(path)
    assert t.stride_tuple == (1, 2, 6)
    np.testing.assert_array_equal(t.to_numpy(), a)
    np.testing.assert_array_equal(t.contiguous().to_numpy(), a)
    x = K.from_numpy(a).permute([2, 0, 1])
    K.save_npy(x, path)
    np.testing.assert_array_equal(np.load(path), a.transpose(2, 0, 1))


def test_npy_bf16_and_numpy_only_dtypes(tmp_path):
    path = str(tmp_path / "x.npy")
    with pytest.raises(K.KilnError) as e:
        K.save_npy(K.ones(K.BF16, [2]), path)
    assert e.value.status == K.ERR_DTYPE and "bf16" in e.value.message
    assert not os.path.exists(path)
    for dt in (np.complex64, "<U3", "<m8[s]"):
        np.save(path, np.zeros(3, dtype=dt))
        with pytest.raises(K.KilnError) as e:
            K.load_npy(path)
        assert e.value.status == K.ERR_DTYPE
        assert np.lib.format.dtype_to_descr(np.dtype(dt)) in e.value.message
    np.save(path, np.zeros(2, dtype=[("a", "<f4"), ("b", "<i2")]))
    with pytest.raises(K.KilnError) as e:
        K.load_npy(path)
    assert e.value.status == K.ERR_DTYPE and "structured" in e.value.message


@pytest.mark.parametrize("dt,kd", [("<u2", K.I32), (">u2", K.I32), ("<u4", K.I64), (">u4", K.I64),
                                   ("<u8", K.I64), (">u8", K.I64)])
@pytest.mark.parametrize("fortran", [False, True])
def test_npy_unsigned(tmp_path, dt, kd, fortran):
    """Unsigned files load into the nearest dtype that holds every value,
    exactly, with the file's shape and layout."""
    path = str(tmp_path / "u.npy")
    top = np.iinfo(np.dtype(dt)).max if dt[1:] != "u8" else np.iinfo(np.int64).max
    rng = np.random.default_rng(3)
    a = rng.integers(0, top, size=(3, 4), dtype=np.uint64, endpoint=True).astype(dt)
    a[0, 0], a[0, 1], a[1, 0] = 0, top, 1
    np.save(path, np.asfortranarray(a) if fortran else a)
    t = K.load_npy(path)
    assert t.dtype == kd and t.shape == (3, 4)
    np.testing.assert_array_equal(t.to_numpy().astype(np.uint64), a.astype(np.uint64))
    np.save(path, np.zeros((0, 2), dt))
    assert K.load_npy(path).shape == (0, 2)


def test_npy_descr_with_nul(tmp_path):
    """A descr string with a NUL byte inside ('<u4\\x00') is no dtype
    (fuzz_npy found the loader reading it as '<u4')."""
    path = str(tmp_path / "nul.npy")
    header = b"{'descr': '<u4\x00', 'fortran_order': False, 'shape': (2,), }"
    header += b" " * (63 - 10 - len(header)) + b"\n"
    open(path, "wb").write(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header + bytes(8))
    with pytest.raises(K.KilnError) as e:
        K.load_npy(path)
    assert e.value.status == K.ERR_DTYPE and "NUL" in e.value.message


def test_npy_uint64_past_int64(tmp_path):
    path = str(tmp_path / "big.npy")
    np.save(path, np.array([1, 2**63 - 1, 2**63, 2**64 - 1], np.uint64))
    with pytest.raises(K.KilnError) as e:
        K.load_npy(path)
    assert e.value.status == K.ERR_DTYPE
    assert "element 2 is 9223372036854775808" in e.value.message and "big.npy" in e.value.message


def test_npy_truncated_numpy_file(tmp_path):
    path = str(tmp_path / "t.npy")
    np.save(path, np.arange(10, dtype=np.int32))
    data = open(path, "rb").read()
    for cut in (0, 5, 9, 20, len(data) - 40, len(data) - 1):
        with open(path, "wb") as f:
            f.write(data[:cut])
        with pytest.raises(K.KilnError) as e:
            K.load_npy(path)
        assert e.value.status == K.ERR_IO and path in e.value.message


# ----------------------------------------------------------- safetensors

def parse_safetensors(path):
    """Independent reader: (header dict, data bytes)."""
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    assert 8 + n <= len(raw)
    text = raw[8:8 + n].decode("utf-8")
    assert text.startswith("{") and (8 + n) % 8 == 0
    def no_duplicates(pairs):
        keys = [k for k, _ in pairs]
        assert len(keys) == len(set(keys)), keys
        return dict(pairs)
    header = json.loads(text, object_pairs_hook=no_duplicates)
    return header, raw[8 + n:]


@examples(40)
@given(dtypes=st.lists(st.sampled_from(K.ALL_DTYPES), min_size=0, max_size=6),
       views=st.lists(strided_view(), min_size=6, max_size=6),
       seed=st.integers(0, 2**32 - 1))
def test_safetensors_python_parses_kiln(workdir, dtypes, views, seed):
    rng = np.random.default_rng(seed)
    names, tensors, want = [], [], []
    for i, d in enumerate(dtypes):
        sizes, strides, offset, n = views[i]
        base = raw_values(rng, d, n)
        tensors.append(K.from_numpy(base, d).as_strided(sizes, strides,
                                                         offset))
        names.append(f"layer.{i}.w{rng.integers(0, 9)}" + "é" * (i % 2))
        want.append(np.array(np_view(base, sizes, strides, offset),
                             order="C", copy=True))   # (keeps 0-d)
    path = str(workdir / "k.safetensors")
    K.save_safetensors(path, names, tensors)
    header, data = parse_safetensors(path)
    assert list(header) == names          # the caller's order
    spans = []
    for name, d, w in zip(names, dtypes, want):
        e = header[name]
        assert set(e) == {"dtype", "shape", "data_offsets"}
        assert e["dtype"] == ST_NAMES[d]
        assert tuple(e["shape"]) == w.shape
        b, end = e["data_offsets"]
        assert b % K.NP_DTYPE[d].itemsize == 0     # aligned
        assert data[b:end] == w.tobytes()
        spans.append((b, end))
    spans.sort()
    at = 0
    for b, end in spans:                   # no hole, no overlap
        assert b == at
        at = end
    assert at == len(data)
    # Kiln reads it back bit for bit, in the same order
    loaded = K.load_safetensors(path)
    assert list(loaded) == names
    for name, d, w in zip(names, dtypes, want):
        assert loaded[name].dtype == d
        same_bits(loaded[name].to_numpy(), w)


def write_safetensors(path, items, metadata=None, pad=0, reverse=False):
    """Independent writer: items = [(name, dtype string, ndarray)]; data
    laid out in the given (or reversed) order."""
    header, chunks, at = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = metadata
    order = list(reversed(items)) if reverse else list(items)
    offsets = {}
    for name, _, arr in order:
        b = arr.tobytes(order="C")
        offsets[name] = (at, at + len(b))
        chunks.append(b)
        at += len(b)
    for name, dt, arr in items:
        header[name] = {"dtype": dt, "shape": list(arr.shape),
                        "data_offsets": list(offsets[name])}
    text = json.dumps(header).encode() + b" " * pad
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))


@examples(40)
@given(dtypes=st.lists(st.sampled_from(K.ALL_DTYPES), min_size=1, max_size=5),
       shapes=st.lists(st.lists(st.integers(0, 3), max_size=3), min_size=5,
                       max_size=5),
       pad=st.integers(0, 9), reverse=st.booleans(),
       seed=st.integers(0, 2**32 - 1))
def test_safetensors_kiln_reads_python(workdir, dtypes, shapes, pad,
                                       reverse, seed):
    rng = np.random.default_rng(seed)
    items = []
    for i, d in enumerate(dtypes):
        shape = tuple(shapes[i])
        arr = raw_values(rng, d, int(np.prod(shape, dtype=np.int64)))
        items.append((f"t{i}", ST_NAMES[d], arr.reshape(shape)))
    path = str(workdir / "p.safetensors")
    write_safetensors(path, items, metadata={"format": "pt"}, pad=pad,
                      reverse=reverse)
    loaded = K.load_safetensors(path)
    assert list(loaded) == [name for name, _, _ in items]
    for (name, _, arr), d in zip(items, dtypes):
        t = loaded[name]
        assert t.dtype == d and t.shape == arr.shape
        same_bits(t.to_numpy(), arr)
        same_bits(K.load_safetensor(path, name).to_numpy(), arr)


def test_safetensors_python_written_errors(tmp_path):
    path = str(tmp_path / "e.safetensors")
    a = np.arange(4, dtype=np.float32)
    write_safetensors(path, [("a", "F32", a), ("b", "U32", a.view(np.uint32))])
    np.testing.assert_array_equal(K.load_safetensor(path, "a").to_numpy(), a)
    with pytest.raises(K.KilnError) as e:
        K.load_safetensors(path)
    assert e.value.status == K.ERR_DTYPE and "U32" in e.value.message
    # offsets past the data section
    write_safetensors(path, [("a", "F32", a)])
    raw = bytearray(open(path, "rb").read())
    with open(path, "wb") as f:
        f.write(raw[:-4])
    with pytest.raises(K.KilnError) as e:
        K.load_safetensor(path, "a")
    assert e.value.status == K.ERR_IO and "truncated" in e.value.message
    with pytest.raises(K.KilnError) as e:
        K.save_safetensors(path, ["x", "x"], [K.zeros(K.F32, [1])] * 2)
    assert e.value.status == K.ERR_ARG and "duplicate" in e.value.message


# ------------------------------------------------------------ callbacks

CB_DTYPES = [K.F32, K.F64, K.I32, K.I64, K.I16, K.I8, K.U8, K.F16, K.BF16,
             K.BOOL]


def kiln_base(values, d):
    """Small non-negative integer values as a Kiln tensor of dtype d."""
    return K.from_numpy(np.asarray(values, dtype=np.float64), d)


def as_f64(t):
    v = t.to_numpy()
    if t.dtype == K.BF16:
        v = K.bf16_bits_to_f32(v)
    return v.astype(np.float64)


def cast_ref(d, v):
    return float(v != 0) if d == K.BOOL else float(v)


@examples(60)
@given(d=st.sampled_from(CB_DTYPES), view=strided_view(),
       seed=st.integers(0, 2**32 - 1))
def test_apply_counter_matches_row_major_loop(d, view, seed):
    sizes, strides, offset, n = view
    rng = np.random.default_rng(seed)
    values = rng.integers(0, 20, n).astype(np.float64)
    if d == K.BOOL:
        values %= 2
    x = kiln_base(values, d)
    old = x.add_scalar(0) if d != K.BOOL else x.logical_not()
    calls = []

    def f(v):
        calls.append(v)
        return (v + len(calls)) % 97

    K.apply_(x.as_strided(sizes, strides, offset), f)
    # reference: the same loop over a NumPy view of the same memory
    ref = values.copy()
    rv = np_view(ref, sizes, strides, offset)
    want_calls = []
    for idx in np.ndindex(*sizes):
        want_calls.append(rv[idx])
        rv[idx] = cast_ref(d, (rv[idx] + len(want_calls)) % 97)
    assert calls == want_calls
    np.testing.assert_array_equal(as_f64(x), ref)
    # an op recorded before the call still sees the old values
    want_old = values if d != K.BOOL else (values == 0)
    np.testing.assert_array_equal(as_f64(old), want_old.astype(np.float64))


def test_apply_stride0_overlapping_view():
    x = K.zeros(K.F32, [3])
    e = x.narrow(0, 2, 1).expand([4, 5])      # 20 visits of one element
    K.apply_(e, lambda v: v * 2 + 1)
    want = 0.0
    for _ in range(20):
        want = want * 2 + 1
    np.testing.assert_array_equal(x.to_numpy(), [0, 0, np.float32(want)])


@examples(40)
@given(d=st.sampled_from(CB_DTYPES), sd=st.sampled_from(CB_DTYPES),
       view=strided_view(), k=st.integers(1, 4),
       alias=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_map_transposed_or_aliasing_src(d, sd, view, k, alias, seed):
    sizes, strides, offset, n = view
    numel = int(np.prod(sizes, dtype=np.int64))
    rng = np.random.default_rng(seed)
    values = rng.integers(0, 20, n).astype(np.float64)
    if d == K.BOOL:
        values %= 2
    x = kiln_base(values, d)
    ref = values.copy()
    if alias:
        # src: a flat view of the same storage (stride 0 when t's view
        # has more elements than the storage)
        src = x.as_strided([numel], [1 if n > numel else 0], 0)
        src_ref = np_view(ref, [numel], [1 if n > numel else 0], 0)
    else:
        # src: a transposed [k, m] matrix of another dtype (m*k == numel)
        k = k if numel % k == 0 else 1
        m = numel // k
        sv = rng.integers(0, 20, numel).astype(np.float64)
        if sd == K.BOOL:
            sv %= 2
        src = kiln_base(sv.reshape(m, k), sd).t()
        src_ref = sv.reshape(m, k).T
    K.map_(x.as_strided(sizes, strides, offset), src,
           lambda a, b: (a + 2 * b + 1) % 89)
    rv = np_view(ref, sizes, strides, offset)
    src_idx = list(np.ndindex(*src_ref.shape))
    for i, idx in enumerate(np.ndindex(*sizes)):
        rv[idx] = cast_ref(d, (rv[idx] + 2 * src_ref[src_idx[i]] + 1) % 89)
    np.testing.assert_array_equal(as_f64(x), ref)


def test_map2_and_errors():
    t = K.zeros(K.F64, [2, 3])
    a = K.from_numpy(np.arange(6, dtype=np.int32).reshape(3, 2)).t()
    b = K.from_numpy(np.array([1, 2], dtype=np.float32)).expand([3, 2])
    K.map2_(t, a, b, lambda x, y, z: x + y * 10 + z)
    av = np.arange(6).reshape(3, 2).T.reshape(-1)
    bv = np.array([[1, 2]] * 3).reshape(-1)
    np.testing.assert_array_equal(t.to_numpy().reshape(-1), av * 10 + bv)
    # C function pointers work too; errors write nothing
    called = []
    fn = K.FN2(lambda x, y, ctx: called.append(x) or 0.0)
    with pytest.raises(K.KilnError) as e:
        K.map_(t, K.zeros(K.F32, [5]), fn)
    assert e.value.status == K.ERR_SHAPE and "kiln_map_" in e.value.message
    with pytest.raises(K.KilnError) as e:
        K.apply_(t, None)
    assert e.value.status == K.ERR_ARG
    assert called == []
    np.testing.assert_array_equal(t.to_numpy().reshape(-1), av * 10 + bv)
