"""kiln.profile(): the C profiler (profile.h) as a context manager."""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import tempfile
from typing import Any

from ._errors import check
from ._lib import lib

_libc = ctypes.CDLL(ctypes.util.find_library("c"))
_libc.fopen.restype = ctypes.c_void_p
_libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
_libc.fclose.argtypes = [ctypes.c_void_p]


class profile:
    """Records every kernel run inside the `with` block
    (kiln_profile_begin/end). str(p) is the C table (kiln_profile_print:
    one row per kernel, time, GB/s, GFLOP/s...), len(p) the number of kernel
    runs, p.write_trace(path) a Chrome trace (Perfetto). Torch:
    torch.profiler.profile."""

    def __enter__(self) -> "profile":
        lib.kiln_profile_begin()
        return self

    def __exit__(self, *exc: Any) -> None:
        lib.kiln_profile_end()

    def __len__(self) -> int:
        return lib.kiln_profile_count()

    def table(self) -> str:
        """The C profiler's table of the records (does not force)."""
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "profile.txt").encode()
            f = _libc.fopen(path, b"w")
            if not f:
                raise OSError("kiln.profile: cannot open a temporary file")
            try:
                check(lib.kiln_profile_print(f))
            finally:
                _libc.fclose(f)
            with open(path, encoding="utf-8", errors="replace") as fh:
                return fh.read()

    __str__ = table

    def write_trace(self, path: "os.PathLike[str] | str") -> None:
        """Writes the records as Chrome trace-event JSON
        (kiln_profile_write_trace)."""
        check(lib.kiln_profile_write_trace(os.fsencode(path)))
