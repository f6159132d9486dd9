#!/usr/bin/env python3
"""python_record.py — row P1: the cost of recording one op from Python
through the kiln package, beside PyTorch eager's cost per op and Kiln's own
C figure (kiln_bench's W8rec) in the same run.

The workload is W8's chain (bench/workloads.c bench_w8_chain): 100 chained
ops on 1,000 F32 elements, cycling y*1.0001, y+x, tanh(y), y-0.25. For Kiln
the chain is recorded (nothing computed; intermediate tensors released as
Python drops them) and timed per op; PyTorch runs it eagerly (each op
computes its 1,000 elements). Median over --runs repetitions after a
warm-up; the chain's value is checked against NumPy once.

    PYTHONPATH=python bench/python_record.py [--runs N] [--kiln-bench PATH]

--kiln-bench (default build/bench/kiln_bench, if present) runs
`kiln_bench --only W8 --no-peers --json` in the same run for the C row.
Target (issue 33): P1 <= 3 us per op.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, os.pardir, "python"))
import kiln  # noqa: E402

CHAIN, N = 100, 1000


def chain(x, tanh):
    y = x
    for i in range(CHAIN):
        k = i % 4
        if k == 0:
            y = y * 1.0001
        elif k == 1:
            y = y + x
        elif k == 2:
            y = tanh(y)
        else:
            y = y - 0.25
    return y


def per_op_us(fn, runs):
    fn()
    fn()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter_ns()
        fn()
        times.append(time.perf_counter_ns() - t0)
    return statistics.median(times) / 1e3 / CHAIN


def c_figure(path):
    if not path or not os.path.exists(path):
        return None, f"{path or 'kiln_bench'} not built"
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "w8.json")
        r = subprocess.run([path, "--only", "W8", "--no-peers", "--json",
                            out], capture_output=True, text=True)
        if r.returncode not in (0, 1) or not os.path.exists(out):
            return None, "kiln_bench failed: " + r.stderr[-200:]
        with open(out) as f:
            data = json.load(f)
    rows = data.get("rows", data) if isinstance(data, dict) else data
    for row in rows:
        if row.get("id") == "W8rec":
            return float(row["rate"]), None
    return None, "no W8rec row in kiln_bench's JSON"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=200)
    p.add_argument("--kiln-bench", default=os.path.join(
        HERE, os.pardir, "build", "bench", "kiln_bench"))
    a = p.parse_args()

    xs = np.random.default_rng(0).random(N, dtype=np.float32)
    x = kiln.tensor(xs)
    x.force()
    y = chain(x, kiln.tanh).numpy()
    ref = chain(xs.astype(np.float64), np.tanh)
    err = float(np.max(np.abs(y - ref)))
    kiln_us = per_op_us(lambda: chain(x, kiln.tanh), a.runs)

    try:
        import torch
        torch.set_num_threads(1)
        tx = torch.from_numpy(xs.copy())
        torch_us = per_op_us(lambda: chain(tx, torch.tanh), a.runs)
    except ImportError:
        torch_us = None
    c_us, why = c_figure(a.kiln_bench)

    def fmt(v):
        return "-" if v is None else f"{v:.3f}"
    print(f"{'id':<6} {'us/op':>8} {'C W8rec':>9} {'PyTorch':>9} "
          f"{'target':>8} {'met?':>5}")
    print(f"{'P1':<6} {kiln_us:8.3f} {fmt(c_us):>9} {fmt(torch_us):>9} "
          f"{'<=3 us':>8} {'yes' if kiln_us <= 3 else 'NO':>5}")
    print(f"  {CHAIN} chained ops on {N} F32 elements recorded from Python "
          f"(kiln {kiln.library_path}), median of {a.runs} runs; check: max "
          f"error {err:.2g} vs NumPy F64; PyTorch eager on 1 thread computes "
          f"each op" + (f"; C figure: {why}" if why else ""))


if __name__ == "__main__":
    main()
