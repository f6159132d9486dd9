"""DLPack both ways with PyTorch 1.13 (and NumPy): memory is shared, checked
by writing on each side; producers' memory stays alive while the other
side uses it; capsules nobody consumed release their reference."""
import gc

import numpy as np
import pytest
from hypothesis import given, strategies as st

import kiln
import kiln._dlpack as D
from conftest import examples, torch_or_skip

torch = torch_or_skip()


@examples(20)
@given(st.sampled_from(["float32", "float64", "int64", "int32", "uint8",
                        "float16"]),
       st.lists(st.integers(1, 4), min_size=0, max_size=3),
       st.booleans())
def test_kiln_to_torch_shares_memory(dtype, shape, transpose):
    k = (kiln.arange(int(np.prod(shape)), dtype=dtype) * 1).reshape(shape)
    if transpose:
        k = k.T
    t = torch.from_dlpack(k)
    assert tuple(t.shape) == k.shape and t.stride() == k.stride()
    assert str(t.dtype) == "torch." + k.dtype.name
    np.testing.assert_array_equal(t.numpy(), k.numpy())
    if k.numel():
        t.fill_(7)                            # torch writes, Kiln reads
        assert float(k.sum()) == 7 * k.numel()
        k.fill_(2)                            # Kiln writes, torch reads
        k.force()
        assert float(t.sum()) == 2 * k.numel()


def test_torch_to_kiln_shares_memory_and_keeps_it_alive():
    base = torch.arange(12.0).reshape(3, 4)
    k = kiln.from_dlpack(base[:, 1:].t())   # a strided view
    assert k.shape == (3, 3) and k.stride() == (1, 4)
    assert k.storage_offset() == 0
    np.testing.assert_array_equal(k.numpy(), base[:, 1:].t().numpy())
    k += 1                                    # Kiln writes into torch
    k.force()
    assert base[0, 1] == 2.0 and base[0, 0] == 0.0
    base[2, 3] = -5                           # torch writes, Kiln sees
    assert float(k[2, 2]) == -5
    del base
    gc.collect()
    assert float(k.sum()) == float(np.sum(k.numpy()))  # memory still alive
    before = len(D._imports)
    del k
    gc.collect()
    assert len(D._imports) == before - 1     # the producer's deleter ran


def test_numpy_dlpack_and_unconsumed_capsule():
    a = np.arange(5.0)
    k = kiln.from_dlpack(a)
    k[1:3] = 0
    k.force()
    np.testing.assert_array_equal(a, [0, 0, 0, 3, 4])
    n = np.from_dlpack(kiln.ones(3) * 2)
    np.testing.assert_array_equal(n, [2, 2, 2])
    before = len(D._exports)
    cap = kiln.to_dlpack(kiln.ones(2))
    assert len(D._exports) == before + 1
    del cap
    gc.collect()
    assert len(D._exports) == before


def test_from_dlpack_rejects():
    with pytest.raises(ValueError):
        kiln.from_dlpack(_NotCapsule())


class _NotCapsule:
    def __dlpack__(self):
        return "not a capsule"


def test_shared_tensors_alive_at_interpreter_exit():
    """Tensors shared both ways, kept in a reference cycle, are freed by the
    interpreter's last collection: the deleters (Python callbacks) must
    still be callable then (a crash here was a segfault at exit)."""
    import os
    import subprocess
    import sys
    code = ("import kiln, torch, numpy as np\n"
            "k = kiln.ones(3) * 2\n"
            "t = torch.from_dlpack(k)\n"
            "kk = kiln.from_dlpack(torch.ones(3))\n"
            "kn = kiln.from_numpy(np.ones(3))\n"
            "cyc = [t, kk, kn, k]; cyc.append(cyc)\n"
            "print('end')\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.join(os.path.dirname(__file__), os.pardir)]
        + [p for p in [env.get("PYTHONPATH")] if p])
    r = subprocess.run([sys.executable, "-c", code], capture_output=True,
                       text=True, timeout=120, env=env)
    assert r.returncode == 0 and r.stdout == "end\n", r.stderr
