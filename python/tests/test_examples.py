"""The Python examples run: examples/python/quickstart.py prints what
Torch prints for the same program, and fashion_cnn.py trains a few steps
(skipped without Debian's dataset-fashion-mnist)."""
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import torch_or_skip

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir,
                    os.pardir)
EXAMPLES = os.path.join(ROOT, "examples", "python")
DATA = "/usr/share/datasets/fashion-mnist"


def run(script, *args):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.join(ROOT, "python")]
        + [p for p in [env.get("PYTHONPATH")] if p])
    r = subprocess.run([sys.executable, os.path.join(EXAMPLES, script),
                        *args], capture_output=True, text=True, timeout=300,
                       env=env)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_quickstart_prints_what_torch_prints():
    torch = torch_or_skip()
    out = run("quickstart.py")
    x = torch.arange(12, dtype=torch.float32).view(3, 4)
    xt = x.T
    y = x * 10
    x[:, 1:3] = -1
    z = xt + xt.relu()
    expect = "\n".join(repr(t) for t in (x, y, z)) + "\n(4, 2)\n[2. 2. 2.]\n"
    assert out == expect


@pytest.mark.skipif(not os.path.exists(
    os.path.join(DATA, "train-images-idx3-ubyte.gz")),
    reason="Debian's dataset-fashion-mnist is not installed")
def test_fashion_cnn_trains():
    out = run("fashion_cnn.py", "--epochs", "1", "--steps", "3", "--eval",
              "256")
    lines = out.splitlines()
    assert lines[0].startswith("Fashion-MNIST: 60000 training")
    epoch = [l for l in lines if l.startswith("epoch 1/1")][0]
    loss = float(epoch.split("loss ")[1].split()[0])
    assert np.isfinite(loss) and 0 < loss < 3
    assert "kernel runs" in out          # the profile table
