#!/usr/bin/env python3
"""fashion_cnn.py — examples/fashion_cnn.c from Python: the same CNN on
Fashion-MNIST through the kiln package,

    conv(1->32, 3x3, pad 1) - ReLU - max-pool 2 - conv(32->64, 3x3, pad 1) -
    ReLU - max-pool 2 - linear(3136->128) - ReLU - dropout 0.25 -
    linear(128->10),

with the cross-entropy loss, loss.backward() and kiln.optim.Adam (lr 1e-3),
images standardized with the training set's pixel mean and std. Same
options and per-epoch output as the C program, and the same numbers: the
parameters are drawn from Kiln's generator in the C program's order and
rule (uniform in +-1/sqrt(fan_in)), the batches are shuffled by the same
splitmix64 Fisher-Yates, and the dropout masks come from the same
generator, so both programs train the same model (to floating-point
reassociation) and their images/s compare the binding's cost.

    fashion_cnn.py [--epochs N] [--seed S] [--batch B] [--lr X]
                   [--data DIR] [--trace FILE] [--steps N] [--eval N]

(--eval N tests on the first N test images only: a quick smoke run.)

Run from a checkout after the build: PYTHONPATH=python
examples/python/fashion_cnn.py (or with the package installed).
"""
from __future__ import annotations

import argparse
import gzip
import math
import os
import sys
import time
from typing import Tuple

import numpy as np

import kiln
from kiln import nn
from kiln.nn import functional as F

DATA = "/usr/share/datasets/fashion-mnist"
MASK64 = (1 << 64) - 1


def load(data: str, prefix: str) -> Tuple[np.ndarray, np.ndarray]:
    """Images [n, 1, 28, 28] in [0, 1] (float32) and labels [n] (int64)
    from the IDX files of Debian's dataset-fashion-mnist."""
    with gzip.open(os.path.join(data, f"{prefix}-images-idx3-ubyte.gz")) as f:
        img = np.frombuffer(f.read(), np.uint8, offset=16)
    with gzip.open(os.path.join(data, f"{prefix}-labels-idx1-ubyte.gz")) as f:
        lab = np.frombuffer(f.read(), np.uint8, offset=8)
    if img.size != lab.size * 784 or lab.max() >= 10:
        raise SystemExit(f"fashion_cnn.py: {data}/{prefix}: bad IDX files")
    return (img.reshape(-1, 1, 28, 28).astype(np.float32) / 255.0,
            lab.astype(np.int64))


def splitmix64(state: int) -> Tuple[int, int]:
    """(new state, next value) of examples/common's fashion_rng_next."""
    state = (state + 0x9E3779B97F4A7C15) & MASK64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return state, z ^ (z >> 31)


def shuffle(perm: np.ndarray, state: int) -> int:
    """fashion_shuffle: Fisher-Yates with splitmix64, in place."""
    for i in range(len(perm) - 1, 0, -1):
        state, r = splitmix64(state)
        j = r % (i + 1)
        perm[i], perm[j] = perm[j], perm[i]
    return state


def build_model() -> nn.Module:
    model = nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(),
        nn.Dropout(0.25), nn.Linear(128, 10))
    return model


def init_like_c(model: nn.Module, seed: int) -> None:
    """The C program's param(): uniform in [-b, b), b = 1/sqrt(fan_in),
    from kiln_rand in parameter order, after kiln.manual_seed(seed)."""
    kiln.manual_seed(seed)
    fan_in = [9, 9, 32 * 9, 32 * 9, 3136, 3136, 128, 128]
    for p, fan in zip(model.parameters(), fan_in):
        b = 1.0 / math.sqrt(fan)
        p.detach().copy_(kiln.rand(p.shape) * (2 * b) - b)
    kiln.force(*model.parameters())


def evaluate(model: nn.Module, x: np.ndarray, y: np.ndarray) -> int:
    model.eval()
    correct = 0
    for s in range(0, len(y), 500):
        logits = model(kiln.tensor(x[s:s + 500]))
        correct += int((logits.argmax(-1) == kiln.tensor(y[s:s + 500]))
                       .sum())
    model.train()
    return correct


def train(args: argparse.Namespace) -> int:
    xtr, ytr = load(args.data, "train")
    xte, yte = load(args.data, "t10k")
    if args.eval:
        xte, yte = xte[:args.eval], yte[:args.eval]
    mean = float(xtr.mean(dtype=np.float64))
    std = float(np.sqrt(((xtr - mean) ** 2).mean(dtype=np.float64)))
    xtr = ((xtr - mean) / std).astype(np.float32)
    xte = ((xte - mean) / std).astype(np.float32)
    print(f"Fashion-MNIST: {len(ytr)} training and {len(yte)} test images, "
          f"standardized with the training set's pixel mean {mean:.4f} and "
          f"std {std:.4f}; CNN conv32-pool-conv64-pool-fc128-fc10, batch "
          f"{args.batch}, Adam lr {args.lr:g}, seed {args.seed} (Python)")
    model = build_model()
    init_like_c(model, args.seed)
    params = model.parameters()
    opt = kiln.optim.Adam(params, lr=args.lr)
    perm = np.arange(len(ytr))
    rng = args.seed
    t0 = time.perf_counter()
    acc = 0.0
    prof = None
    for epoch in range(1, args.epochs + 1):
        rng = shuffle(perm, rng)
        prof = kiln.profile()
        prof.__enter__()   # the table printed at the end covers the last epoch
        te0 = time.perf_counter()
        loss_sum, correct, seen, steps = 0.0, 0, 0, 0
        for s in range(0, len(ytr) - args.batch + 1, args.batch):
            if args.steps and steps >= args.steps:
                break
            idx = perm[s:s + args.batch]
            x, y = kiln.tensor(xtr[idx]), kiln.tensor(ytr[idx])
            logits = model(x)
            loss = F.cross_entropy(logits, y)
            hits = (logits.argmax(-1) == y).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
            kiln.force(loss, hits, *params)   # one schedule, as the C job
            loss_sum += loss.item()
            correct += hits.item()
            seen += args.batch
            steps += 1
        dt = time.perf_counter() - te0
        prof.__exit__(None, None, None)
        acc = evaluate(model, xte, yte) / len(yte)
        print(f"epoch {epoch}/{args.epochs}  loss {loss_sum / max(steps, 1):.4f}"
              f"  train acc {100.0 * correct / max(seen, 1):.2f}%  test acc "
              f"{100.0 * acc:.2f}%  {seen / dt:.0f} images/s  elapsed "
              f"{time.perf_counter() - t0:.1f} s", flush=True)
    print(f"final test accuracy {100.0 * acc:.2f}%")
    if prof is not None:
        print(prof)
        if args.trace:
            prof.write_trace(args.trace)
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--steps", type=int, default=0,
                   help="stop each epoch after N steps (0: all)")
    p.add_argument("--data", default=DATA)
    p.add_argument("--trace", default=None)
    p.add_argument("--eval", type=int, default=0,
                   help="test on the first N test images (0: all)")
    args = p.parse_args()
    if args.epochs < 1 or args.batch < 1 or not args.lr > 0 or args.steps < 0:
        p.error("epochs, batch and lr must be positive, steps not negative")
    return train(args)


if __name__ == "__main__":
    sys.exit(main())
