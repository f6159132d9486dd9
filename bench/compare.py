#!/usr/bin/env python3
"""Compares two kiln_bench --json files row by row.

    bench/compare.py BEFORE.json AFTER.json

Prints, for every row both files have, Kiln's time in each, the ratio
after / before (< 1: faster), and each run's fraction of its limit and
speedup over the best peer. The limit is a row's kind's: bandwidth (triad
or read roofline) for memory rows, the compute roofline for the GEMM rows
(kind "compute": G1-G4), which also show their speedup over the best
OpenBLAS kernel of each run (x OpenBLAS). Rows whose time changed by more than the
--noise fraction (default 0.10) are marked. Machine figures (triad, read
roofline, other processes' load) are printed first: compare runs taken on
a quiet machine, or read the limit fractions, which carry the machine's
state of that run with them.
"""
import argparse
import json
import sys


def load(path):
    with open(path) as f:
        data = json.load(f)
    return data, {r["id"]: r for r in data["rows"]}


def fmt(v, spec=".3f"):
    return "-" if v is None else format(v, spec)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("before")
    p.add_argument("after")
    p.add_argument("--noise", type=float, default=0.10)
    a = p.parse_args()
    (mb, rb), (ma, ra) = load(a.before), load(a.after)
    for name, m in (("before", mb), ("after", ma)):
        print(f"{name}: triad {fmt(m.get('triad_gbs'), '.2f')} GB/s, read {fmt(m.get('read_gbs'), '.2f')} GB/s, "
              f"other processes {fmt(m.get('other_cores'), '.2f')} cores")
    print()
    print(f"| {'id':6} | {'before ms':>9} | {'after ms':>9} | {'after/before':>12} | {'x limit':>15} | {'x best':>15} "
          f"| {'x OpenBLAS':>15} |")
    print("|--------|----------:|----------:|-------------:|----------------:|----------------:|----------------:|")
    for rid, b in rb.items():
        if rid not in ra:
            continue
        c = ra[rid]
        ratio = c["kiln_ms"] / b["kiln_ms"] if b["kiln_ms"] and c["kiln_ms"] else None
        mark = "" if ratio is None or abs(ratio - 1) <= a.noise else (" faster" if ratio < 1 else " SLOWER")
        lim = f"{fmt(b['x_limit'])} -> {fmt(c['x_limit'])}"
        best = f"{fmt(b['x_best'])} -> {fmt(c['x_best'])}"
        blas = f"{fmt(b.get('x_blas'))} -> {fmt(c.get('x_blas'))}" if b.get("kind") == "compute" else "-"
        print(f"| {rid:6} | {fmt(b['kiln_ms']):>9} | {fmt(c['kiln_ms']):>9} | {fmt(ratio) + mark:>12} | {lim:>15} "
              f"| {best:>15} | {blas:>15} |")
    missing = sorted(set(rb) ^ set(ra))
    if missing:
        print(f"\nrows in only one file: {', '.join(missing)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
