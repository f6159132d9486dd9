#!/usr/bin/env python3
"""make_seeds.py — writes the seed corpora of the file-format harnesses.

    /usr/bin/python3 tests/fuzz/make_seeds.py     # rewrites the seeds in place

corpus/npy: NumPy's own .npy files (numpy.save and
numpy.lib.format.write_array) of every dtype Kiln reads, C and Fortran
order, both byte orders, format versions 1.0/2.0/3.0, 0-d and empty
shapes, plus a few dtypes Kiln rejects (uint16, complex, structured).

corpus/safetensors: files laid out by hand with struct + json as the
format specification says (8-byte little-endian header size, JSON
header, data section): every dtype string, several tensors, 0-d and empty
tensors, __metadata__, a dtype Kiln lacks.

The program corpus (corpus/program) is written by fuzz_program itself
(see docs/testing.md): its seeds are byte strings in the decoder's format.
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
    np.save(out("npy", "u2_rejected.npy"), np.arange(4, dtype="<u2"))
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


if __name__ == "__main__":
    write_npy_seeds()
    write_safetensors_seeds()
