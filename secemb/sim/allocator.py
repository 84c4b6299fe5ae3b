"""Freed memory kept for reuse while a simulated round's devices run (glibc's malloc).

A simulated round runs its devices one after another in one process, and with a large model
each device allocates and frees the same model-sized buffers (its dense vector, gradients and
upload shares: DeepFM at d = 512 is 112 M dense values, ~7 GB of such buffers a device).
glibc serves every allocation above its ``mmap`` threshold (at most 32 MiB) with a fresh
``mmap`` and returns it with ``munmap`` on free, so each device pays the kernel to fault in and
zero every page again: measured at d = 512, 2.9 s of a device's 3.4 s were system time.

:func:`reusing_freed_memory` keeps such buffers on the heap while the devices run, so the next
device reuses the pages the previous one freed, then hands the free pages back to the kernel
(``malloc_trim``) and restores mmap-backed large allocations for the servers' close, whose
buffers differ in size from round to round.  Nothing about the model depends on it.  Where the
C library is not glibc (macOS, musl) it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache

__all__ = ["MMAP_THRESHOLD_MAX", "keeping_round_heap", "reusing_freed_memory"]

# mallopt parameters (glibc's malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_MMAP_MAX = -4
#: glibc's largest dynamic mmap threshold on 64-bit systems (``DEFAULT_MMAP_THRESHOLD_MAX``):
#: a buffer larger than this is always mmap-backed by default
MMAP_THRESHOLD_MAX = 32 << 20
_MMAP_MAX_DEFAULT = 65536
_NEVER_TRIM = -1  # mallopt(3): -1 disables trimming


@cache
def _glibc() -> ctypes.CDLL | None:
    """The process's C library where it is glibc (it has ``mallopt`` and ``malloc_trim``)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
    except OSError:
        return None
    if not all(hasattr(libc, f) for f in ("gnu_get_libc_version", "mallopt", "malloc_trim")):
        return None
    libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    libc.malloc_trim.argtypes = [ctypes.c_size_t]
    return libc


@contextmanager
def reusing_freed_memory(largest: int) -> Iterator[None]:
    """Within the block, large allocations come from the heap and freed memory stays there for
    reuse; on leaving it, the heap's free pages go back to the kernel and large allocations are
    mmap-backed again, with glibc's thresholds at the values its dynamic rule reaches after
    freeing large buffers (mmap above :data:`MMAP_THRESHOLD_MAX`, trim above twice that).

    ``largest``: the bytes of the largest buffer the block allocates repeatedly; at most
    :data:`MMAP_THRESHOLD_MAX` (glibc already reuses such buffers) the block changes nothing.
    Process-wide: every thread's allocations are served this way meanwhile."""
    libc = _glibc()
    if libc is None or largest <= MMAP_THRESHOLD_MAX:
        yield
        return
    libc.mallopt(_M_MMAP_MAX, 0)
    libc.mallopt(_M_TRIM_THRESHOLD, _NEVER_TRIM)
    try:
        yield
    finally:
        libc.malloc_trim(0)
        libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX)
        libc.mallopt(_M_TRIM_THRESHOLD, 2 * MMAP_THRESHOLD_MAX)
        libc.mallopt(_M_MMAP_MAX, _MMAP_MAX_DEFAULT)


def keeping_round_heap() -> bool:
    """Keep a server process's heap between rounds: buffers up to :data:`MMAP_THRESHOLD_MAX` come
    from the heap, and its free top is given back to the kernel only above twice that (the values
    :func:`reusing_freed_memory` leaves behind).  With glibc's dynamic thresholds a round's heap
    grows through ``brk`` and is trimmed back at its end, so that every round faults the same pages
    in again (docs/results.md, "Session 25": 1,156-1,376 pages a round at ML-100K, about 0.7 us
    each).  Process-wide and lasting; nothing about the model depends on it.  Returns whether it
    was applied (``False`` where the C library is not glibc)."""
    libc = _glibc()
    if libc is None:
        return False
    libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX)
    libc.mallopt(_M_TRIM_THRESHOLD, 2 * MMAP_THRESHOLD_MAX)
    return True
