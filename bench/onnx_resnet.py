#!/usr/bin/env python3
"""onnx_resnet.py — ResNet-18 inference, Kiln (kiln_bench_onnx on the ONNX
export) against PyTorch 1.13 in the same run.

Usage: onnx_resnet.py KILN_BENCH_ONNX [--size 224] [--iters 5] [--batches 1,32] [--threads N]

torchvision's ResNet-18 (random weights, seed 0, eval mode) is exported
with torch.onnx.export (opset 13, dynamic batch) into a temporary folder.
For each batch size: PyTorch's images/s (torch.no_grad, one warm-up run,
then --iters runs), then Kiln's in a fresh
process with an empty on-disk kernel cache (its first run's wall and
compile time, then images/s), then Kiln again in a second process over
the same cache (the kernels it compiles should be 0). Prints one row per
batch size. Both use --threads threads (default: the CPUs this process
may use; torch.set_num_threads and KILN_NUM_THREADS). Figures are
printed, never asserted.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

import torch
import torchvision


def torch_rate(model, batch, size, iters):
    x = torch.randn(batch, 3, size, size)
    with torch.no_grad():
        model(x)
        t = time.perf_counter()
        for _ in range(iters):
            model(x)
        per = (time.perf_counter() - t) / iters
    return batch / per


def kiln_run(tool, path, batch, size, iters, cache, threads):
    env = dict(os.environ, KILN_CACHE_DIR=cache, KILN_NUM_THREADS=str(threads))
    out = subprocess.run([tool, path, str(batch), str(size), str(iters)], capture_output=True, text=True, env=env)
    if out.returncode != 0:
        sys.exit(f"kiln_bench_onnx failed: {out.stderr.strip()}")
    return dict(kv.split("=") for kv in out.stdout.split())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tool")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--batches", default="1,32")
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None).eval()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "resnet18.onnx")
        torch.onnx.export(model, torch.randn(1, 3, a.size, a.size), path, opset_version=13,
                          input_names=["input"], output_names=["logits"],
                          dynamic_axes={"input": {0: "N"}, "logits": {0: "N"}})
        print(f"ResNet-18, {a.size}x{a.size}, {a.iters} timed runs each, {a.threads} threads (Kiln and PyTorch)")
        print(f"{'batch':>5} {'torch img/s':>12} {'kiln img/s':>11} {'kiln/torch':>10} {'first run s':>11} "
              f"{'compile s':>9} {'compiled':>8} {'2nd process compiled':>20}")
        for b in (int(s) for s in a.batches.split(",")):
            tr = torch_rate(model, b, a.size, a.iters)
            cache = os.path.join(tmp, f"cache{b}")
            os.makedirs(cache)
            k1 = kiln_run(a.tool, path, b, a.size, a.iters, cache, a.threads)
            k2 = kiln_run(a.tool, path, b, a.size, 1, cache, a.threads)
            kr = float(k1["images_per_s"])
            print(f"{b:>5} {tr:>12.1f} {kr:>11.1f} {kr / tr:>10.2f} {float(k1['first_s']):>11.2f} "
                  f"{float(k1['compile_s']):>9.2f} {k1['compiled']:>8} {k2['compiled']:>20}")


if __name__ == "__main__":
    main()
