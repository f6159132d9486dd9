#!/usr/bin/env python3
"""make_seeds.py — writes the seed corpora of the file-format harnesses.

    /usr/bin/python3 tests/fuzz/make_seeds.py     # rewrites the seeds in place

corpus/npy: NumPy's own .npy files (numpy.save and
numpy.lib.format.write_array) of every dtype Kiln reads, C and Fortran
order, both byte orders, format versions 1.0/2.0/3.0, 0-d and empty
shapes, unsigned u2/u4/u8 files (widened on load; one uint64 past
INT64_MAX), plus a few dtypes Kiln rejects (complex, structured).

corpus/safetensors: files laid out by hand with struct + json as the
format specification says (8-byte little-endian header size, JSON
header, data section): every dtype string, several tensors, 0-d and empty
tensors, __metadata__, a dtype Kiln lacks.

corpus/program: programs in fuzz_program's byte format (an opcode byte
per instruction, then its argument bytes; see fuzz_program.c), written
with the helpers below, which know the decoder's argument ranges. OPS
must list fuzz_program.c's op table in its order.

Crash inputs that became regression cases are kept next to the seeds
(files named crash-*); this script never removes them.
"""
import json
import os
import struct

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def out(kind, name):
    d = os.path.join(HERE, "corpus", kind)
    os.makedirs(d, exist_ok=True)
    return os.path.join(d, name)


def write_npy_seeds():
    rng = np.random.default_rng(15)
    dtypes = ["?", "u1", "i1", "<i2", "<i4", "<i8", "<f2", "<f4", "<f8", ">i4", ">f8", ">f2"]
    for dt in dtypes:
        a = rng.integers(-50, 50, size=(2, 3)).astype(dt)
        tag = dt.replace("<", "le").replace(">", "be").replace("?", "bool")
        np.save(out("npy", f"{tag}_2x3.npy"), a)
    f = np.asfortranarray(np.arange(24, dtype="<f4").reshape(2, 3, 4))
    np.save(out("npy", "f4_fortran_2x3x4.npy"), f)
    np.save(out("npy", "i8_scalar.npy"), np.array(7, dtype="<i8"))
    np.save(out("npy", "f4_empty_0x3.npy"), np.zeros((0, 3), dtype="<f4"))
    np.save(out("npy", "u1_1d.npy"), np.arange(5, dtype="u1"))
    for version in [(2, 0), (3, 0)]:
        with open(out("npy", f"f8_v{version[0]}.npy"), "wb") as fh:
            np.lib.format.write_array(fh, np.linspace(0, 1, 6).reshape(3, 2), version=version)
    np.save(out("npy", "u2_1d.npy"), np.array([0, 1, 65535, 300], dtype="<u2"))
    np.save(out("npy", "beu4_2x2.npy"), np.array([[0, 4294967295], [7, 65536]], dtype=">u4"))
    np.save(out("npy", "u8_fortran_2x3.npy"), np.asfortranarray(
        np.array([[0, 1, 2**63 - 1], [5, 2**40, 9]], dtype="<u8")))
    np.save(out("npy", "u8_rejected.npy"), np.array([1, 2**64 - 1], dtype="<u8"))
    np.save(out("npy", "c8_rejected.npy"), np.arange(3, dtype="<c8"))
    np.save(out("npy", "struct_rejected.npy"), np.zeros(2, dtype=[("a", "<i4"), ("b", "<f4")]))


ST_SIZES = {"BOOL": 1, "U8": 1, "I8": 1, "I16": 2, "I32": 4, "I64": 8, "F16": 2, "BF16": 2, "F32": 4,
            "F64": 8, "U16": 2}


def write_safetensors(path, tensors, metadata=None):
    """tensors: list of (name, dtype string, shape, raw bytes)."""
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dt, shape, raw in tensors:
        assert len(raw) == ST_SIZES[dt] * int(np.prod(shape, dtype=np.int64))
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(text)) + text + data)


def write_safetensors_seeds():
    rng = np.random.default_rng(16)
    np_of = {"BOOL": "?", "U8": "u1", "I8": "i1", "I16": "<i2", "I32": "<i4", "I64": "<i8", "F16": "<f2",
             "F32": "<f4", "F64": "<f8", "U16": "<u2"}
    for dt, npdt in np_of.items():
        a = rng.integers(0, 2 if dt == "BOOL" else 100, size=(2, 3)).astype(npdt)
        write_safetensors(out("safetensors", f"{dt.lower()}_2x3.safetensors"), [("t", dt, (2, 3), a.tobytes())])
    bf = (np.arange(4, dtype="<f4").view("<u4") >> 16).astype("<u2")
    write_safetensors(out("safetensors", "bf16_4.safetensors"), [("w", "BF16", (4,), bf.tobytes())])
    many = [("w", "F32", (2, 2), np.arange(4, dtype="<f4").tobytes()),
            ("b", "I64", (3,), np.arange(3, dtype="<i8").tobytes()),
            ("s", "F64", (), np.array(2.5, dtype="<f8").tobytes()),
            ("e", "U8", (0, 4), b""),
            ("m", "BOOL", (2, 1, 2), bytes([1, 0, 0, 1]))]
    write_safetensors(out("safetensors", "several.safetensors"), many, metadata={"format": "pt"})
    write_safetensors(out("safetensors", "empty_file.safetensors"), [])


# ------------------------------------------------------------ programs

OPS = ["from_data", "full", "arange", "scalar", "narrow", "select", "slice", "transpose", "permute", "expand",
       "unfold", "as_strided", "squeeze/unsqueeze", "view/reshape", "contiguous/clone/to_dtype", "unary", "binary",
       "binary_scalar", "where", "clamp", "reduce", "argmax/argmin", "index_select", "gather", "fill_", "copy_",
       "index_fill_", "index_add_/index_copy_", "masked_fill_", "set", "get", "read", "realize", "release"]
DTYPES = ["F32", "I32", "I64", "BOOL", "F64", "U8", "I8", "I16"]
HALF = {"F16": 3 * 8 + 0, "BF16": 3 * 8 + 4}  # pick_dtype's bytes for the half types
SCALARS = [0, 1, -1, 2, -2, 0.5, -0.25, 3, 7, -100, 1.5, 0.125, 100, "nan", "inf", "-inf"]
UNARY = ["neg", "abs", "sign", "relu", "floor", "ceil", "round", "trunc", "sqrt", "exp", "tanh", "sigmoid",
         "reciprocal", "logical_not"]
BINARY = ["add", "sub", "mul", "div", "maximum", "minimum", "fmod", "remainder", "eq", "ne", "lt", "le", "gt", "ge",
          "and", "or", "xor"]
REDUCE = ["sum", "prod", "amax", "amin", "mean", "all", "any"]


def op(name):
    return [OPS.index(name)]


def rng(v, lo, hi):
    """The byte pick_int(lo, hi) decodes as v."""
    assert lo <= v <= hi
    return v - lo


def dim(d, ndim):
    return rng(d, -ndim - 1, ndim)


def shape(*sizes):
    return [len(sizes)] + [s - 1 if s > 0 else 22 for s in sizes]


def sc(v):
    return SCALARS.index(v)


def dtype(dt):
    return HALF[dt] if dt in HALF else DTYPES.index(dt)


def from_data(dst, dt, sizes, seed=1, wide=False):
    return op("from_data") + [dst, dtype(dt)] + shape(*sizes) + [seed, 7 if wide else 0]


def zeros(dst, dt, sizes):
    return op("full") + [dst, 0, dtype(dt)] + shape(*sizes)


def index(values, i32=False):
    """make_index's bytes for in-range values (out-of-range: see pick_index)."""
    return [1 if i32 else 0] + [8 * v for v in values]


def seed_design_example():
    """DESIGN.md's example: a write through a narrow after an op read x."""
    return (zeros(0, "F32", [5]) + op("narrow") + [1, 0, dim(0, 1), rng(1, -7, 7), rng(3, -1, 6)]
            + op("binary") + [2, BINARY.index("add"), 0, 0] + op("fill_") + [1, sc(1)]
            + op("binary_scalar") + [3, BINARY.index("mul"), 0, sc(2)]
            + op("read") + [2] + op("read") + [0] + op("read") + [1] + op("read") + [3])


def seed_index_ops():
    """index_select, gather, index_add_ with duplicates, an out-of-range index."""
    p = from_data(0, "I64", [4, 3], seed=3)
    p += op("index_select") + [1, 0, dim(0, 2), 3] + index([3, 0, 3])
    p += op("index_select") + [2, 0, dim(1, 2), 2] + [0, 8 * 2, 6]  # index 3 of a dim of 3: KILN_ERR_INDEX
    p += op("gather") + [3, 0, dim(1, 2), 1, 2, 2] + index([2, 0, 1, 1])  # index sizes [2, 2]
    p += op("index_add_/index_copy_") + [3, 0, dim(0, 2), 3] + index([1, 1, 2]) + [5, 0]  # add, t's dtype
    p += op("read") + [0] + op("read") + [1] + op("read") + [3]
    return p


def seed_views_and_writes():
    """transpose, copy_ between views of one storage, masked_fill_, reductions."""
    p = from_data(0, "F32", [3, 4], seed=9)
    p += op("transpose") + [1, 0, dim(0, 2), dim(1, 2)]
    p += op("slice") + [2, 0, dim(1, 2), rng(0, -8, 8), rng(4, -8, 8), rng(2, 0, 3)]
    p += op("binary") + [3, BINARY.index("mul"), 0, 0]
    p += op("copy_") + [1, 3]  # into x through its transpose, from x*x recorded before: row-major
    p += op("masked_fill_") + [0, 0, sc(-1)] + [2, 0]
    p += op("reduce") + [4, 0b00010001, 1, REDUCE.index("sum"), 0]
    p += op("argmax/argmin") + [5, 1, 0, dim(1, 2)]
    p += op("read") + [0] + op("read") + [3] + op("read") + [4] + op("read") + [5]
    return p


def seed_expand_unfold():
    """expand (stride 0) written by fill_, refused by copy_; unfold; as_strided; a force in between."""
    p = from_data(0, "I32", [3, 1], seed=4)
    p += op("expand") + [1, 0, rng(2, 2, 4), 2, 4 * 5 + 1]  # [3, 1] -> [3, 5]
    p += op("fill_") + [1, sc(7)]
    p += op("copy_") + [1, 0]
    p += op("realize") + [0, 0, 1]
    p += from_data(2, "F64", [6], seed=5)
    p += op("unfold") + [3, 2, dim(0, 1), rng(3, -1, 4), rng(2, 0, 3)]
    p += op("as_strided") + [4, 2, rng(2, 0, 4), 2, 2, 1, 2, rng(1, 0, 7)]
    p += op("unary") + [5, UNARY.index("exp"), 3]
    p += op("set") + [2, sc(100), rng(0, -7, 6)]
    p += op("read") + [3] + op("read") + [4] + op("read") + [5]
    return p


def seed_dtypes():
    """U8 with I8 promotes to I16; where; clamp with an infinite bound; to_dtype; reshape's copy."""
    p = from_data(0, "U8", [2, 3], seed=6, wide=True) + from_data(1, "I8", [3], seed=7, wide=True)
    p += op("binary") + [2, BINARY.index("add"), 0, 1]
    p += op("binary") + [3, BINARY.index("gt"), 0, 1]
    p += op("where") + [4, 3, 2, 1]
    p += op("clamp") + [5, 2, sc("-inf"), sc(3)]
    p += op("contiguous/clone/to_dtype") + [6, 2, 5, dtype("F32")]
    p += op("transpose") + [7, 6, dim(0, 2), dim(1, 2)]
    p += op("view/reshape") + [7, 1, 7, rng(1, 0, 4), 2]  # reshape the transpose to [6]: a copy
    p += op("index_fill_") + [7, dim(0, 1), 2, sc(-2)] + [0, 8 * 1, 8 * 5]
    p += op("reduce") + [0, 0, 0, REDUCE.index("prod"), 4]
    for s in range(8):
        p += op("read") + [s]
    return p


def seed_half():
    """F16 and BF16: integer operands rounded to the half type, F16 with BF16 promoting to F32, a scalar,
    a sum and a mean, a write through a view."""
    p = from_data(0, "F16", [2, 3], seed=11) + from_data(1, "BF16", [3], seed=12) + from_data(2, "I32", [3], seed=13, wide=True)
    p += op("binary") + [3, BINARY.index("mul"), 0, 2]
    p += op("binary") + [4, BINARY.index("add"), 0, 1]
    p += op("binary_scalar") + [5, BINARY.index("div"), 1, sc(3)]
    p += op("reduce") + [6, 0b10, 0, REDUCE.index("sum"), 3]
    p += op("reduce") + [7, 0, 1, REDUCE.index("mean"), 0]
    p += op("select") + [1, 0, dim(1, 2), rng(1, -7, 6)]
    p += op("fill_") + [1, sc(1.5)]
    for s in range(8):
        p += op("read") + [s]
    return p


def write_program_seeds():
    seeds = {"design_example": seed_design_example(), "index_ops": seed_index_ops(),
             "views_and_writes": seed_views_and_writes(), "expand_unfold": seed_expand_unfold(),
             "dtypes": seed_dtypes(), "half": seed_half()}
    for name, prog in seeds.items():
        with open(out("program", name), "wb") as fh:
            fh.write(bytes(prog))


if __name__ == "__main__":
    write_npy_seeds()
    write_safetensors_seeds()
    write_program_seeds()
