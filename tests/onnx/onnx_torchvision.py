#!/usr/bin/env python3
"""onnx_torchvision.py — a torchvision architecture (or the project's own
CNN) exported to ONNX by PyTorch 1.13 and run by Kiln's kiln-onnx-run
must give PyTorch's outputs.

Usage: onnx_torchvision.py KILN_ONNX_RUN MODEL [MODEL ...]
(MODEL: a torchvision.models constructor, e.g. resnet18, mobilenet_v2,
squeezenet1_0; or fashion_cnn: examples/fashion_cnn.c's network, as
bench/cnn_accuracy.py defines it in PyTorch, trained for 20 Adam steps on
Fashion-MNIST (Debian's dataset-fashion-mnist; random images where it is
absent) and run on 8 test images).

Each model gets random weights from a fixed seed, and random batch-norm
running statistics (a fresh model's are 0 and 1, which would leave batch
norm untested); it runs in eval mode on a 1x3x64x64 input (small, so the
test stays fast), is exported with torch.onnx.export (opset 13), and its
output from `kiln-onnx-run MODEL.onnx -o DIR input.npy` must match
PyTorch's within 1e-4 relative: max |kiln - torch| <= 1e-4 * max |torch|.

Exits 77 (CTest's skip) when torch or torchvision cannot be imported.
"""
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
    import torchvision
except ImportError as e:  # optional oracle: skipped, not failed
    print(f"SKIP: {e} (Debian: python3-torch, python3-torchvision)")
    sys.exit(77)

RTOL = 1e-4


def build(name):
    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(weights=None)
    g = torch.Generator().manual_seed(1)
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
    return model.eval()


def fashion_cnn():
    """The CNN job's network after 20 training steps, and 8 inputs."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
    import cnn_accuracy
    torch.manual_seed(0)
    model = cnn_accuracy.network()
    try:
        xs, ys = cnn_accuracy.load("train")
        xs, ys = xs[:20 * 128], ys[:20 * 128]
        xt = cnn_accuracy.load("t10k")[0][:8]
    except OSError:  # no dataset: random images still train the weights away from their init
        g = torch.Generator().manual_seed(3)
        xs, ys = torch.rand(20 * 128, 1, 28, 28, generator=g), torch.randint(0, 10, (20 * 128,), generator=g)
        xt = torch.rand(8, 1, 28, 28, generator=g)
    mean, std = xs.mean(), xs.std()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model.train()
    for k in range(20):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model((xs[k * 128:(k + 1) * 128] - mean) / std), ys[k * 128:(k + 1) * 128])
        loss.backward()
        opt.step()
    return model.eval(), (xt - mean) / std


def check(tool, name, tmp):
    if name == "fashion_cnn":
        model, x = fashion_cnn()
    else:
        model = build(name)
        x = torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(2))
    path = os.path.join(tmp, f"{name}.onnx")
    torch.onnx.export(model, x, path, opset_version=13, input_names=["input"], output_names=["logits"])
    with torch.no_grad():
        want = model(x).numpy()
    np.save(os.path.join(tmp, "input.npy"), x.numpy())
    run = subprocess.run([tool, path, "-o", tmp, os.path.join(tmp, "input.npy")], capture_output=True, text=True)
    if run.returncode != 0:
        print(f"FAIL {name}: kiln-onnx-run exited {run.returncode}: {run.stderr.strip()}")
        return False
    got = np.load(os.path.join(tmp, "logits.npy"))
    if got.shape != want.shape or got.dtype != want.dtype:
        print(f"FAIL {name}: output {got.dtype} {got.shape}, PyTorch's {want.dtype} {want.shape}")
        return False
    err, scale = float(np.abs(got - want).max()), float(np.abs(want).max())
    ok = err <= RTOL * scale
    print(f"{'ok' if ok else 'FAIL'} {name}: max |kiln - torch| = {err:.3g}, max |torch| = {scale:.3g} "
          f"(relative {err / scale:.3g}, limit {RTOL:g})")
    return ok


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    tool = sys.argv[1]
    ok = True
    for name in sys.argv[2:]:
        with tempfile.TemporaryDirectory() as tmp:
            ok &= check(tool, name, tmp)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
