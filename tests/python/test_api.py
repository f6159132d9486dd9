"""The public API surface: the binding matches kiln.h, every function is
exported, errors, lifetime/scopes, creation, queries, printing, execution
settings."""
import ctypes
import os
import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import kiln_ctypes as K
import oracle as O
from conftest import examples

_INCLUDE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "api", "include", "kiln")
# The headers the binding covers: kiln.h and the layers it includes
# (kiln/dist.h, the collectives, is not bound: they run under mpirun).
HEADERS = [os.path.join(_INCLUDE, h) for h in ("kiln.h", "nn.h", "profile.h")]

_CODE = {"kiln_tensor *": "T", "const kiln_tensor *": "T",
         "kiln_storage *": "S", "const kiln_storage *": "S", "int": "i",
         "int64_t": "l", "uint64_t": "u", "double": "d", "bool": "b",
         "const int64_t *": "L", "const int *": "I", "kiln_dtype": "i",
         "kiln_device": "i", "kiln_reduction": "i", "kiln_pad_mode": "i", "kiln_interp_mode": "i", "kiln_nonlinearity": "i", "kiln_fan_mode": "i", "const double *": "p", "kiln_engine_stats *": "p", "kiln_status": "i", "void": "v",
         "const char *": "z", "char *": "m", "size_t": "n", "FILE *": "p", "double *": "p",
         "void *": "p", "const void *": "p", "kiln_tensor *const *": "A",
         "kiln_tensor **": "A", "kiln_kernel_record *": "p",
         "const char *const *": "Z", "int *": "p", "bool *": "p", "char **": "p",
         "char ***": "p", "kiln_tensor ***": "p", "kiln_fn1": "p",
         "kiln_fn2": "p", "kiln_fn3": "p", "kiln_optimizer *": "p",
         "const kiln_optimizer *": "p"}


def header_signatures():
    text = "".join(open(h).read() for h in HEADERS)
    src = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    src = re.sub(r"^\s*#.*$", "", src, flags=re.M)  # the KILN_API #defines
    out = {}
    for ret, args in re.findall(r"KILN_API\s+([^;]*?)\s*\(([^;]*?)\)\s*;",
                                src, flags=re.S):
        m = re.match(r"(.*?)(\**)\s*(kiln_\w+)$", " ".join(ret.split()))
        rt = (m.group(1).strip() + (" " + m.group(2) if m.group(2) else ""))
        codes = ""
        args = " ".join(args.split())
        if args != "void":
            depth, cur, parts = 0, "", []
            for c in args:
                depth += c == "("
                depth -= c == ")"
                if c == "," and depth == 0:
                    parts.append(cur)
                    cur = ""
                else:
                    cur += c
            parts.append(cur)
            for p in parts:
                if "(*" in p:
                    codes += "p"
                    continue
                t = re.match(r"(.*?)\w+$", p.strip()).group(1)
                t = re.sub(r"\*(?: \*)+",
                           lambda m: "*" * m.group(0).count("*"),
                           " ".join(t.replace("*", " * ").split()))
                t = t.replace(" * const *", " *const *")
                codes += _CODE.get(t, "?" + t)
        out[m.group(3)[5:]] = (_CODE.get(rt.strip(), "?" + rt), codes)
    return out


def test_binding_matches_header():
    hdr = header_signatures()
    assert set(hdr) == set(K.SIGNATURES), (
        "in kiln.h only: %s; in the binding only: %s" %
        (sorted(set(hdr) - set(K.SIGNATURES)),
         sorted(set(K.SIGNATURES) - set(hdr))))
    wrong = {n: (hdr[n], K.SIGNATURES[n]) for n in hdr
             if hdr[n] != K.SIGNATURES[n]}
    assert not wrong, wrong


def test_every_function_exported():
    assert K.MISSING == []


def test_status_and_dtype_names():
    for code, name in K.STATUS_NAMES.items():
        assert K.status_name(code) == name
    for d, name in K.DTYPE_NAMES.items():
        assert K.dtype_name(d) == name
        assert K.dtype_size(d) == K.NP_DTYPE[d].itemsize
    assert K.dtype_name(99) == "?" and K.lib.kiln_dtype_size(99) == 0


def test_error_is_first_and_sticky():
    a = K.zeros(K.F32, [3, 4])
    b = K.zeros(K.F32, [5])
    assert K.lib.kiln_add(a.handle, b.handle) is None
    first = K.last_error()
    assert first.startswith("kiln_add: ") and "[3, 4]" in first
    assert K.lib.kiln_last_status() == K.ERR_SHAPE
    # a NULL input keeps the first error
    assert K.lib.kiln_exp(None) is None
    assert K.lib.kiln_narrow(a.handle, 5, 0, 1) is None
    assert K.last_error() == first
    K.lib.kiln_clear_error()
    assert K.last_error() == "" and K.lib.kiln_last_status() == 0
    # a NULL argument alone sets KILN_ERR_ARG
    assert K.lib.kiln_exp(None) is None
    assert K.lib.kiln_last_status() == K.ERR_ARG
    assert "kiln_exp" in K.last_error()
    K.lib.kiln_clear_error()


@pytest.mark.parametrize("call,fn", [
    (lambda: K.narrow(K.zeros(K.F32, [3]), 0, 2, 2), "kiln_narrow"),
    (lambda: K.narrow(K.zeros(K.F32, [3]), 1, 0, 1), "kiln_narrow"),
    (lambda: K.select(K.zeros(K.F32, [3]), 0, 3), "kiln_select"),
    (lambda: K.slice(K.zeros(K.F32, [3]), 0, 0, 3, 0), "kiln_slice"),
    (lambda: K.transpose(K.zeros(K.F32, [3]), 0, 1), "kiln_transpose"),
    (lambda: K.t(K.zeros(K.F32, [1, 2, 3])), "kiln_t"),
    (lambda: K.permute(K.zeros(K.F32, [2, 3]), [0, 0]), "kiln_permute"),
    (lambda: K.unfold(K.zeros(K.F32, [3]), 0, 4, 1), "kiln_unfold"),
    (lambda: K.expand(K.zeros(K.F32, [2]), [3]), "kiln_expand"),
    (lambda: K.view(K.zeros(K.F32, [6]), [4, -1]), "kiln_view"),
    (lambda: K.view(K.transpose(K.zeros(K.F32, [2, 3]), 0, 1), [6]),
     "kiln_view"),
    (lambda: K.as_strided(K.zeros(K.F32, [4]), [3], [2], 0),
     "kiln_as_strided"),
    (lambda: K.zeros(K.F32, [-1]), "kiln_zeros"),
    (lambda: K.empty(42, [1]), "kiln_empty"),
    (lambda: K.arange(K.F32, 0, 5, 0), "kiln_arange"),
    (lambda: K.arange(K.F32, 0, 5, -1), "kiln_arange"),
    (lambda: K.linspace(K.F32, 0, 1, -1), "kiln_linspace"),
    (lambda: K.rand(K.I32, [2]), "kiln_rand"),
    (lambda: K.copy_(K.zeros(K.F32, [3]), K.zeros(K.F32, [4])),
     "kiln_copy_"),
    (lambda: K.item(K.zeros(K.F32, [2])), "kiln_item"),
    (lambda: K.get(K.zeros(K.F32, [2]), [2]), "kiln_get"),
    (lambda: K.set(K.zeros(K.F32, [2]), [-3], 1.0), "kiln_set"),
    (lambda: K.size(K.zeros(K.F32, [2]), 1), "kiln_size"),
    (lambda: K.set_backend("cuda"), "kiln_set_backend"),
    (lambda: K.set_num_threads(0), "kiln_set_num_threads"),
])
def test_errors_name_the_function(call, fn):
    with pytest.raises(K.KilnError) as e:
        call()
    assert e.value.message.startswith(fn + ":"), e.value.message
    assert e.value.status < 0


def test_read_too_small_buffer():
    t = K.zeros(K.F32, [4])
    out = np.empty(3, np.float32)
    with pytest.raises(K.KilnError) as e:
        K.read(t, out)
    assert e.value.status == K.ERR_ARG


def test_failed_write_leaves_input_unchanged():
    t = K.from_numpy(np.arange(4, dtype=np.float32))
    with pytest.raises(K.KilnError):
        K.copy_(t, K.zeros(K.F32, [5]))
    assert list(t.to_numpy()) == [0, 1, 2, 3]


def test_scopes():
    """Tensors made inside a scope are released at its end unless kept."""
    x = K.zeros(K.F32, [3])
    K.scope_begin()
    a = K.lib.kiln_add_scalar(x.handle, 1.0)
    b = K.lib.kiln_mul_scalar(a, 2.0)
    kept = K.lib.kiln_keep(b)
    assert kept == b
    K.scope_begin()
    inner = K.lib.kiln_exp(b)
    K.lib.kiln_keep(inner)              # moves to the outer scope
    K.scope_end()
    assert K.lib.kiln_keep(inner) == inner   # and out of it
    K.scope_end()
    # b and inner are the caller's now; a is gone
    kb = K.Tensor(b)
    ki = K.Tensor(inner)
    assert list(kb.to_numpy()) == [2, 2, 2]
    assert np.allclose(ki.to_numpy(), np.exp(2))
    K.scope_end()                       # no open scope: nothing happens


def test_retain_release():
    x = K.zeros(K.F32, [2])
    h = K.lib.kiln_retain(x.handle)
    assert h == x.handle
    K.lib.kiln_release(h)
    assert list(x.to_numpy()) == [0, 0]
    K.lib.kiln_release(None)
    assert K.lib.kiln_retain(None) is None


@pytest.mark.parametrize("d", K.ALL_DTYPES,
                         ids=[K.DTYPE_NAMES[d] for d in K.ALL_DTYPES])
def test_creation(d):
    for shape in [(), (0,), (2, 3), (1, 0, 2)]:
        for f, v in ((K.zeros, 0), (K.ones, 1), (K.empty, 0)):
            t = f(d, list(shape))
            assert t.shape == shape and t.dtype == d and K.is_contiguous(t)
            want = O.convert(np.full(shape, v, np.float64), K.F64, d)
            O.assert_same(t.to_numpy(), want, d, what=f.__name__)
        t = K.full(d, list(shape), 3.0)
        O.assert_same(t.to_numpy(), O.convert(np.full(shape, 3.0), K.F64, d),
                      d, what="full")
    s = K.scalar(d, 1.0)
    assert s.shape == () and K.numel(s) == 1 and K.item(s) == 1.0


@examples(120)
@given(d=st.sampled_from(K.ALL_DTYPES),
       shape=st.lists(st.integers(0, 4), max_size=5),
       seed=st.integers(0, 2**32 - 1))
def test_from_data_round_trip(d, shape, seed):
    x = O.random_values(np.random.default_rng(seed), d, shape, "special")
    t = K.from_numpy(x, d)
    assert t.shape == tuple(shape) and t.dtype == d
    got = t.to_numpy()
    assert got.tobytes() == np.ascontiguousarray(x).tobytes() or \
        (d == K.BOOL and (got == x).all())
    if x.size:
        idx = tuple(s - 1 for s in shape)
        want = O.as_f64(x[idx], d) if d != K.BOOL else float(x[idx])
        got1 = K.get(t, list(idx))
        assert got1 == want or (np.isnan(got1) and np.isnan(want))


def test_arange_linspace():
    for d in (K.F32, K.F64, K.I32, K.I64):
        a = K.arange(d, 0, 10, 3)
        O.assert_same(a.to_numpy(), np.arange(0, 10, 3).astype(K.NP_DTYPE[d]),
                      d, what="arange")
    a = K.arange(K.F64, 1, 0, -0.25)
    assert np.allclose(a.to_numpy(), np.arange(1, 0, -0.25))
    a = K.arange(K.F32, 0, 0, 1)
    assert a.shape == (0,)
    ls = K.linspace(K.F64, -1, 1, 5)
    assert np.allclose(ls.to_numpy(), np.linspace(-1, 1, 5), rtol=0,
                       atol=1e-15)
    assert K.linspace(K.F32, 0, 1, 0).shape == (0,)
    assert list(K.linspace(K.F32, 2, 5, 1).to_numpy()) == [2.0]


def test_rand_randn():
    K.manual_seed(123)
    a = K.rand(K.F32, [1000]).to_numpy()
    K.manual_seed(123)
    b = K.rand(K.F32, [1000]).to_numpy()
    assert (a == b).all() and (a >= 0).all() and (a < 1).all()
    assert 0.4 < a.mean() < 0.6
    n = K.randn(K.F64, [4000]).to_numpy()
    assert abs(n.mean()) < 0.1 and 0.9 < n.std() < 1.1
    for d in (K.F16, K.BF16):
        r = O.as_f64(K.rand(d, [100]).to_numpy(), d)
        assert (r >= 0).all() and (r <= 1).all()


def test_from_blob_shares_memory():
    buf = np.arange(6, dtype=np.float32)
    t = K.from_blob(K.F32, [2, 3], None, buf.ctypes.data, None, None)
    assert list(K.sum(t, [], False).to_numpy().reshape(1)) == [15.0]
    K.fill_(K.select(t, 0, 1), -1.0)
    K.realize(t)
    assert list(buf) == [0, 1, 2, -1, -1, -1]
    s = K.from_blob(K.F32, [3], [2], buf.ctypes.data, None, None)
    assert list(s.to_numpy()) == [0, 2, -1]
    del t, s


def test_from_blob_deleter_called():
    calls = []
    DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)
    cb = DELETER(lambda data, ctx: calls.append((data, ctx)))
    buf = np.zeros(4, np.int32)
    t = K.from_blob(K.I32, [4], None, buf.ctypes.data,
                    ctypes.cast(cb, ctypes.c_void_p).value, 1234)
    v = K.narrow(t, 0, 1, 2)
    del t
    assert calls == []
    del v
    assert calls == [(buf.ctypes.data, 1234)]


def test_data_pointer():
    t = K.from_numpy(np.arange(12, dtype=np.int32).reshape(3, 4))
    v = K.select(K.t(t), 0, 2)          # column 2: 2, 6, 10 (stride 4)
    p = K.data(v)
    arr = np.ctypeslib.as_array(ctypes.cast(p, ctypes.POINTER(ctypes.c_int32)),
                                shape=(9,))
    assert [arr[0], arr[4], arr[8]] == [2, 6, 10]


def test_print_format():
    t = K.from_numpy(np.arange(20, dtype=np.float32).reshape(4, 5))
    s = K.print_to_string(t)
    assert s.rstrip().endswith("[kiln.FloatTensor of size 4x5]"), s
    assert K.to_string(t) == s
    names = {K.U8: "Byte", K.I8: "Char", K.I16: "Short", K.I32: "Int",
             K.I64: "Long", K.F16: "Half", K.F32: "Float", K.F64: "Double"}
    for d, n in names.items():
        assert f"[kiln.{n}Tensor of size 2]" in K.to_string(K.zeros(d, [2]))


def test_realize_many_and_settings():
    a = K.from_numpy(np.arange(4, dtype=np.float32))
    b = K.exp(a)
    c = K.add(b, b)
    assert K.realize_many([b, c]) == 0
    assert np.allclose(c.to_numpy(), 2 * np.exp(np.arange(4)), rtol=1e-6)
    assert K.set_backend("llvm") == 0
    assert K.set_num_threads(2) == 0
    big = K.add_scalar(K.arange(K.F32, 0, 1 << 18, 1), 1.0)
    assert float(K.sum(big, [], False).to_numpy()) == pytest.approx(
        (1 << 18) * ((1 << 18) + 1) / 2, rel=1e-6)
    assert K.set_num_threads(1) == 0
    assert K.set_num_threads(_default_threads()) == 0


def _default_threads():
    return int(os.environ.get("KILN_NUM_THREADS", os.cpu_count() or 1))


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_threads_large_tensors(threads):
    """Big enough to be split across the pool: elementwise results are
    identical for any thread count; reductions stay within their bound."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((513, 1031)).astype(np.float32)
    K.set_num_threads(threads)
    try:
        kx = K.from_numpy(x)
        y = K.relu(K.add_scalar(K.mul_scalar(K.t(kx), 2.0), -1.0))
        want = np.maximum(x.T * np.float32(2) + np.float32(-1), 0)
        assert (y.to_numpy() == want).all()
        s = K.sum(kx, [0], False).to_numpy()
        exact = x.astype(np.float64).sum(0)
        assert (np.abs(s - exact) <= 513 * 2**-24 *
                np.abs(x).astype(np.float64).sum(0)).all()
        K.fill_(K.narrow(kx, 1, 5, 1000), 0.5)
        x[:, 5:1005] = 0.5
        assert (kx.to_numpy() == x).all()
    finally:
        K.set_num_threads(_default_threads())


def test_profile_records():
    x = K.from_numpy(np.arange(1000, dtype=np.float32))
    K.profile_begin()
    y = K.relu(K.add_scalar(K.mul_scalar(x, 2.0), -7.0))
    K.realize(y)
    K.profile_end()
    recs = K.profile_records()
    assert recs, "no kernel recorded"
    assert all(r["backend"] for r in recs) and all(r["name"] for r in recs)
    assert sum(r["n_ops"] for r in recs) >= 1
    assert any(r["numel"] == 1000 for r in recs), recs
    with pytest.raises(K.KilnError) as e:
        K.profile_get(len(recs), ctypes.addressof(
            ctypes.create_string_buffer(4096)))
    assert e.value.status == K.ERR_INDEX
    K.realize(K.exp(x))                     # not recorded after the end
    assert len(K.profile_records()) == len(recs)
