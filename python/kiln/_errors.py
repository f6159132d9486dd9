"""Kiln's errors as Python exceptions.

Every failed C call (a NULL tensor or a negative kiln_status) becomes a
KilnError carrying kiln_last_error()'s message, which is then cleared (Kiln
keeps a thread's *first* error, so a stale one would hide the next). The
subclass follows the status, deriving from the built-in exception Torch
raises in the same case: shape, argument and dtype problems are
ValueError/TypeError (Torch raises RuntimeError for most of them, and
KilnError is a RuntimeError too), an index out of range is IndexError, an
allocation failure MemoryError.
"""
from __future__ import annotations

from ._lib import lib


class KilnError(RuntimeError):
    """A Kiln C call failed. `status` is the negative kiln_status, `message`
    kiln_last_error()'s text, e.g. "kiln_add: sizes [3] and [4] cannot be
    broadcast"."""

    def __init__(self, message: str, status: int = -1) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class KilnArgumentError(KilnError, ValueError):
    """KILN_ERR_ARG: a bad argument (a dim out of range, a released
    tensor...)."""


class KilnShapeError(KilnError, ValueError):
    """KILN_ERR_SHAPE: sizes that do not fit the op."""


class KilnDtypeError(KilnError, TypeError):
    """KILN_ERR_DTYPE: a dtype the op does not accept."""


class KilnIndexError(KilnError, IndexError):
    """KILN_ERR_INDEX: an index out of range."""


class KilnMemoryError(KilnError, MemoryError):
    """KILN_ERR_OOM: an allocation failed."""


class KilnUnsupportedError(KilnError, NotImplementedError):
    """KILN_ERR_UNSUPPORTED: not implemented for these arguments."""


_BY_STATUS = {-1: KilnArgumentError, -2: KilnShapeError, -3: KilnDtypeError,
              -4: KilnMemoryError, -8: KilnUnsupportedError,
              -9: KilnIndexError}


def take_error(status: int = 0) -> KilnError:
    """The exception for this thread's pending Kiln error (its message and
    status), which is cleared. `status` is used when the C side recorded
    none."""
    st = lib.kiln_last_status() or status or -1
    msg = (lib.kiln_last_error() or b"").decode("utf-8", "replace")
    lib.kiln_clear_error()
    return _BY_STATUS.get(st, KilnError)(msg or "kiln: call failed", st)


def check(status: int) -> None:
    """Raises take_error() when a kiln_status is negative."""
    if status < 0:
        raise take_error(status)
