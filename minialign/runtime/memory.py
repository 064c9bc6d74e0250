"""Freed memory given back to the operating system, so a long-running process plateaus.

glibc's malloc keeps freed blocks in its heaps for reuse. Tensors of ever-new sizes (batches of
varied lengths) leave free holes between live blocks that later, differently sized tensors do not
fill, and glibc returns none of it by itself: a process encoding varied batches grows without bound
(all-MiniLM-L6-v2, 200 calls of 1-32 texts of 1-200 words: 348 -> 832 MB and rising; with this,
between 670 and 730 MB over 300 calls). `release_free_memory` calls glibc's `malloc_trim` (which also gives back whole free
pages inside its heaps) once the resident memory has grown `margin` bytes past what it was after
the last release: a few calls in a hundred pay for it (the pages are faulted in again when reused;
releasing after every call cost 10-25% of the time here). Every runner calls it after a run
(BatchEngine.run), worker processes after each batch. Elsewhere (macOS, musl) it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from functools import cache

MARGIN = 256 << 20  # bytes of growth past the resident size after the last release before the next

_base: list[int | None] = [None]  # resident bytes after the last release (per process); None: not measured yet


@cache
def _malloc_trim():
    """glibc's malloc_trim, or None where the C library is another or the resident size is unknown."""
    if not os.path.exists("/proc/self/statm"):
        return None
    try:
        trim = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def resident_bytes() -> int:
    """This process's resident memory (Linux: /proc/self/statm)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def release_free_memory(*, margin: int | None = None) -> bool:
    """Give malloc's free memory back to the operating system if the resident memory has grown more
    than `margin` (default MARGIN) past its size after the last release (the first call only
    measures). Returns whether it released."""
    trim = _malloc_trim()
    if trim is None:
        return False
    resident, base = resident_bytes(), _base[0]
    if base is not None and resident <= base + (MARGIN if margin is None else margin):
        return False
    if base is not None:
        trim(0)
        resident = resident_bytes()
    _base[0] = resident
    return base is not None
