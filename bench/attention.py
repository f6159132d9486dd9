#!/usr/bin/env python3
"""attention.py — bench/attention.c's measurement in PyTorch 1.13 eager:
one attention forward and backward on q, k, v F32 [B, H, N, D], with the
explicit formulation softmax(q kᵀ / sqrt(D) [causal: -inf above the
diagonal]) v (Torch 1.13 has no F.scaled_dot_product_attention), loss =
sum(o * c), gradients of q, k and v. One untimed run first; prints the
median of --reps runs and the peak resident set size (getrusage), and
that peak less the resident size once the inputs were made, in MiB, in
the C program's format.

  attention.py [--n N] [--heads H] [--dim D] [--batch B] [--reps R] [--causal] [--threads T]
"""
import argparse
import math
import os
import resource
import time

import torch


def rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


def main():
    p = argparse.ArgumentParser()
    for name, default in [("n", 2048), ("heads", 8), ("dim", 64), ("batch", 1), ("reps", 5),
                          ("threads", os.cpu_count())]:
        p.add_argument("--" + name, type=int, default=default)
    p.add_argument("--causal", action="store_true")
    o = p.parse_args()
    torch.set_num_threads(o.threads)
    torch.manual_seed(1)
    shape = (o.batch, o.heads, o.n, o.dim)
    q, k, v = (torch.randn(shape, requires_grad=True) for _ in range(3))
    c = torch.randn(shape)
    mask = torch.ones(o.n, o.n, dtype=torch.bool).tril() if o.causal else None
    base = rss_mib()

    def run():
        s = q @ k.transpose(-2, -1) * (1 / math.sqrt(o.dim))
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        out = torch.softmax(s, -1) @ v
        torch.autograd.grad((out * c).sum(), (q, k, v))

    t0 = time.perf_counter()
    run()
    first = time.perf_counter() - t0
    times = []
    for _ in range(o.reps):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    times.sort()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"torch attention B {o.batch} H {o.heads} N {o.n} D {o.dim}{' causal' if o.causal else ''}: "
          f"fwd+bwd {1e3 * times[o.reps // 2]:.2f} ms (median of {o.reps}; first run {first:.2f} s), "
          f"peak RSS {peak:.0f} MiB, {peak - base:.0f} MiB above the inputs")


if __name__ == "__main__":
    main()
