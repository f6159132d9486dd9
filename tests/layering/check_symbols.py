#!/usr/bin/env python3
"""Checks that no layer of libkiln refers to a symbol defined by a layer it
does not build on (tests/layering/CMakeLists.txt).

Usage: check_symbols.py NM LAYERS_TXT

LAYERS_TXT has one line per layer target: "name dep... | internal... |
object...": the targets it builds on and passes on to the layers above it
(kiln_layer's DEPS), and those only its own files see (INTERNAL). A layer
may use symbols of itself, of its DEPS and INTERNAL layers, and of the
layers those pass on (their DEPS, recursively); a reference to any other
layer's symbol is printed, and the exit status is 1.
"""
import subprocess
import sys


def read_layers(path):
    layers = {}
    with open(path) as f:
        for line in f:
            if line.count("|") != 2:
                continue
            head, internal, objs = line.split("|")
            name, *deps = head.split()
            layers[name] = (deps, internal.split(), objs.split())
    return layers


def passed_on(layers, name):
    """name and every layer it passes on to its users (DEPS, recursively)."""
    seen, todo = set(), [name]
    while todo:
        n = todo.pop()
        if n not in seen:
            seen.add(n)
            todo.extend(layers[n][0])
    return seen


def allowed(layers, name):
    deps, internal, _ = layers[name]
    out = {name}
    for d in deps + internal:
        out |= passed_on(layers, d)
    return out


def symbols(nm, objs):
    """(defined, undefined) global symbols of the object files."""
    out = subprocess.run([nm, *objs], capture_output=True, text=True, check=True).stdout
    defined, undefined = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in "TDBRCVW":
            defined.add(parts[2])
        elif len(parts) == 2 and parts[0] == "U":
            undefined.add(parts[1])
    return defined, undefined


def main():
    nm, spec = sys.argv[1], sys.argv[2]
    layers = read_layers(spec)
    if not layers:
        print(f"no layers in {spec}")
        return 1
    owner, refs = {}, {}
    for name, (_, _, objs) in layers.items():
        defined, undefined = symbols(nm, objs)
        for s in defined:
            owner[s] = name
        refs[name] = undefined
    bad = 0
    for name in sorted(layers):
        ok = allowed(layers, name)
        for s in sorted(refs[name]):
            if s in owner and owner[s] not in ok:
                print(f"{name} refers to {s}, defined in {owner[s]}, which it does not build on")
                bad += 1
    print(f"{len(layers)} layers, {sum(len(r) for r in refs.values())} references checked, {bad} across the layering")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
