"""Zero-copy NumPy sharing (checked by writing both ways), errors as
exceptions, the use of a closed tensor, and memory over many small ops."""
import gc
import os
import threading

import numpy as np
import pytest

import kiln


def test_from_numpy_shares_memory_both_ways():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    k = kiln.from_numpy(a)
    assert k.shape == (3, 4) and k.stride() == (4, 1)
    k.select(0, 1).fill_(-1)        # Kiln write through a view
    k.force()
    np.testing.assert_array_equal(a[1], -1)
    a[2, 3] = 99                     # NumPy write, seen by Kiln
    assert float(k.sum()) == float(a.sum())
    n = k.numpy()                    # the same memory again
    assert np.shares_memory(n, a)


def test_from_numpy_strided_view():
    base = np.arange(24, dtype=np.int64).reshape(4, 6)
    v = base[::2, 1::2]
    k = kiln.from_numpy(v)
    assert k.stride() == (12, 2)
    np.testing.assert_array_equal((k * 1).numpy(), v)
    k += 100
    k.force()
    assert base[0, 1] == 101 and base[0, 0] == 0


def test_from_numpy_keeps_owner_alive():
    k = kiln.from_numpy(np.full((1000,), 3.0, np.float64))
    gc.collect()                      # the array has no other reference
    junk = [np.full((1000,), 7.0) for _ in range(50)]
    assert float(k.sum()) == 3000.0
    del junk
    view = k.narrow(0, 10, 5)         # outlives k
    del k
    gc.collect()
    assert float(view.sum()) == 15.0


def test_from_numpy_rejects():
    with pytest.raises(ValueError):
        kiln.from_numpy(np.arange(5.0)[::-1])
    ro = np.arange(3.0)
    ro.flags.writeable = False
    with pytest.raises(ValueError):
        kiln.from_numpy(ro)
    with pytest.raises(TypeError):
        kiln.from_numpy(np.zeros(2, np.complex64))


def test_numpy_zero_copy_after_force():
    k = kiln.arange(6, dtype=kiln.float32).reshape(2, 3) * 2
    n = k.numpy()
    n2 = k.numpy()
    assert np.shares_memory(n, n2)
    n[0, 0] = 42                      # write into Kiln's buffer
    assert float(k.sum()) == 42 + 2 + 4 + 6 + 8 + 10
    t = k.T.numpy()                   # a strided view, same memory
    assert t.strides == (4, 12) and np.shares_memory(t, n)
    del k
    gc.collect()
    assert n[1, 2] == 10              # the array keeps the tensor alive


def test_errors_carry_kiln_message():
    a, b = kiln.zeros(3, 4), kiln.zeros(5)
    with pytest.raises(kiln.KilnShapeError) as e:
        a + b
    assert "kiln_add" in str(e.value) and "[3, 4]" in str(e.value)
    assert isinstance(e.value, ValueError) and e.value.status == -2
    with pytest.raises(IndexError):
        a.select(0, 7)
    with pytest.raises(ValueError):
        a.transpose(0, 5)
    with pytest.raises(TypeError):
        kiln.tensor([1, 2]).mean()
    # the error was cleared: the next call works and reports its own error
    assert float((a + 1).sum()) == 12.0


def test_closed_tensor_cannot_be_used():
    k = kiln.ones(3)
    v = k.narrow(0, 0, 2)
    k.close()
    k.close()                         # idempotent
    with pytest.raises(kiln.KilnArgumentError, match="closed"):
        k + 1
    with pytest.raises(kiln.KilnArgumentError):
        k.shape
    assert "closed" in repr(k)
    assert float(v.sum()) == 2.0      # views keep the storage
    with kiln.zeros(2) as z:
        assert z.numel() == 2
    with pytest.raises(kiln.KilnArgumentError):
        z.numel()


def test_tensor_from_another_thread():
    k = kiln.ones(4) * 3
    k.force()
    out = []
    th = threading.Thread(target=lambda: out.append(float((k + 1).sum())))
    th.start()
    th.join()
    assert out == [16.0]


def _rss_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


@pytest.mark.skipif(not os.path.exists("/proc/self/status"),
                    reason="needs /proc")
@pytest.mark.skipif("libasan" in os.environ.get("LD_PRELOAD", ""),
                    reason="AddressSanitizer quarantines freed memory: RSS grows by design "
                    "(its leak and use-after-free checks cover this loop)")
def test_many_small_ops_keep_rss_flat():
    x = kiln.ones(4)
    x.force()
    for _ in range(20000):            # warm up caches and the allocator
        y = (x + 1) * 2
    gc.collect()
    before = _rss_kib()
    for _ in range(50000):            # 100,000 recorded ops
        y = (x + 1) * 2
    gc.collect()
    grown = _rss_kib() - before
    assert grown < 8 * 1024, f"RSS grew by {grown} KiB over 100,000 ops"
    assert float(y.sum()) == 16.0


def test_threads_sharing_pending_tensors():
    """Four Python threads write one pending storage through views and
    force results from it. Kiln allows one thread at a time on such
    tensors; the package holds the GIL during Kiln calls, so this is safe
    (with the GIL released it segfaulted). Run in a child process so a
    crash fails this test only."""
    import subprocess
    import sys
    code = (
        "import threading, kiln\n"
        "base = kiln.zeros(64)\n"
        "errors = []\n"
        "def work(seed):\n"
        "    try:\n"
        "        for i in range(300):\n"
        "            v = base[seed % 8:][:8]\n"
        "            v += 1\n"
        "            y = (base * 2 + v.sum()).tanh()\n"
        "            if i % 10 == 0:\n"
        "                float(y.sum())\n"
        "    except Exception as e:\n"
        "        errors.append(repr(e))\n"
        "ts = [threading.Thread(target=work, args=(s,)) for s in range(4)]\n"
        "[t.start() for t in ts]\n"
        "[t.join() for t in ts]\n"
        "print(errors, float(base.sum()))\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.join(os.path.dirname(__file__), os.pardir)]
        + [p for p in [env.get("PYTHONPATH")] if p])
    r = subprocess.run([sys.executable, "-c", code], capture_output=True,
                       text=True, timeout=300, env=env)
    assert r.returncode == 0, f"rc {r.returncode}: {r.stderr[-500:]}"
    assert r.stdout == f"[] {4 * 300 * 8.0}\n", r.stdout


def test_numpy_writes_are_not_versioned():
    """docs/python.md: a NumPy write is not a Kiln write, so a pending op
    over the memory reads what it holds when forced; Kiln's own in-place
    write is versioned (the op recorded before it does not see it)."""
    a = np.ones(3, np.float32)
    k = kiln.from_numpy(a)
    y = k * 2
    a[0] = 5
    assert y.numpy().tolist() == [10.0, 2.0, 2.0]
    z = k * 2
    k.fill_(7)
    assert z.numpy().tolist() == [10.0, 2.0, 2.0]
