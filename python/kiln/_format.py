"""Printing a tensor as Torch 1.13 prints it (torch/_tensor_str.py, default
print options: precision 4, threshold 1000, edgeitems 3, linewidth 80), from
its values as a NumPy array; "torch." becomes "kiln." in the dtype suffix."""
from __future__ import annotations

import math
from typing import List

import numpy as np

PRECISION = 4
THRESHOLD = 1000
EDGEITEMS = 3
LINEWIDTH = 80


class _Formatter:
    """Torch's _Formatter: one width and one style (integer-valued floats
    as "3.", fixed "3.1416" or scientific "3.1416e+00") for every element."""

    def __init__(self, values: np.ndarray) -> None:
        self.floating = values.dtype.kind == "f"
        self.int_mode = True
        self.sci_mode = False
        self.max_width = 1
        flat = values.reshape(-1)
        if not self.floating:
            for v in flat.tolist():
                self.max_width = max(self.max_width, len(str(v)))
            return
        vals = flat[np.isfinite(flat) & (flat != 0)]
        if vals.size == 0:
            return
        absv = np.abs(vals).astype(np.float64)
        vmin, vmax = float(absv.min()), float(absv.max())
        self.int_mode = bool(np.all(vals == np.ceil(vals)))
        wide = vmax / vmin > 1000.0 or vmax > 1.0e8
        if self.int_mode:
            self.sci_mode = wide
        else:
            self.sci_mode = wide or vmin < 1.0e-4
        for v in vals.tolist():
            if self.sci_mode:
                s = f"{v:.{PRECISION}e}"
            elif self.int_mode:
                s = f"{v:.0f}" + " "
            else:
                s = f"{v:.{PRECISION}f}"
            self.max_width = max(self.max_width, len(s))

    def format(self, v) -> str:
        if self.floating:
            if self.sci_mode:
                s = f"{v:{self.max_width}.{PRECISION}e}"
            elif self.int_mode:
                s = f"{v:.0f}"
                if not (math.isinf(v) or math.isnan(v)):
                    s += "."
            else:
                s = f"{v:.{PRECISION}f}"
        else:
            s = str(v)
        return (self.max_width - len(s)) * " " + s


def _vector(values: np.ndarray, indent: int, summarize: bool,
            fmt: _Formatter) -> str:
    per_line = max(1, int(math.floor((LINEWIDTH - indent)
                                     / (fmt.max_width + 2))))
    if summarize and values.shape[0] > 2 * EDGEITEMS:
        data = ([fmt.format(v) for v in values[:EDGEITEMS].tolist()]
                + [" ..."]
                + [fmt.format(v) for v in values[-EDGEITEMS:].tolist()])
    else:
        data = [fmt.format(v) for v in values.tolist()]
    lines = [", ".join(data[i:i + per_line])
             for i in range(0, len(data), per_line)]
    return "[" + (",\n" + " " * (indent + 1)).join(lines) + "]"


def _nested(values: np.ndarray, indent: int, summarize: bool,
            fmt: _Formatter) -> str:
    if values.ndim == 0:
        return fmt.format(values.item())
    if values.ndim == 1:
        return _vector(values, indent, summarize, fmt)
    n = values.shape[0]
    if summarize and n > 2 * EDGEITEMS:
        rows: List[str] = (
            [_nested(values[i], indent + 1, summarize, fmt)
             for i in range(EDGEITEMS)] + ["..."]
            + [_nested(values[i], indent + 1, summarize, fmt)
               for i in range(n - EDGEITEMS, n)])
    else:
        rows = [_nested(values[i], indent + 1, summarize, fmt)
                for i in range(n)]
    sep = "," + "\n" * (values.ndim - 1) + " " * (indent + 1)
    return "[" + sep.join(rows) + "]"


def _summarized(values: np.ndarray) -> np.ndarray:
    """Torch's get_summarized_data: the edge items of every dim."""
    if values.ndim == 0:
        return values
    for d in range(values.ndim):
        if values.shape[d] > 2 * EDGEITEMS:
            idx = list(range(EDGEITEMS)) + list(
                range(values.shape[d] - EDGEITEMS, values.shape[d]))
            values = np.take(values, idx, axis=d)
    return values


def _add_suffixes(body: str, suffixes: List[str], indent: int) -> str:
    out = [body]
    last = len(body) - body.rfind("\n") + 1
    for s in suffixes:
        if last + len(s) + 2 > LINEWIDTH:
            out.append(",\n" + " " * indent + s)
            last = indent + len(s)
        else:
            out.append(", " + s)
            last += len(s) + 2
    out.append(")")
    return "".join(out)


def tensor_repr(values: np.ndarray, dtype_name: str, default_float: str,
                extra: List[str]) -> str:
    """Torch's repr of a tensor holding `values` (float16/bfloat16 already
    widened to float32) of dtype `dtype_name`; `default_float` is the
    default float dtype's name; `extra`: further suffixes
    ("requires_grad=True")."""
    prefix = "tensor("
    indent = len(prefix)
    suffixes: List[str] = []
    if values.size == 0:
        if values.ndim != 1:
            suffixes.append("size=" + str(tuple(values.shape)))
        if dtype_name != default_float:
            suffixes.append("dtype=kiln." + dtype_name)
        body = "[]"
    else:
        if dtype_name not in (default_float, "int64", "bool"):
            suffixes.append("dtype=kiln." + dtype_name)
        summarize = values.size > THRESHOLD
        fmt = _Formatter(_summarized(values) if summarize else values)
        body = _nested(values, indent, summarize, fmt)
    return _add_suffixes(prefix + body, suffixes + extra, indent)
