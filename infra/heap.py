"""A long-lived Python process's heap, kept from creeping up under glibc's malloc.

glibc raises its mmap threshold each time a large block served by mmap is freed (up to 32 MiB), so
after the auditor's first big Kafka fetch, every later buffer of a few MiB comes from the heap
instead, and the freed ones leave holes the heap never returns: the supervisor's RSS crept up by
3 MB a minute in a 60-minute soak with nothing held growing. Fixing the threshold (which turns the
adjustment off) and trimming the heap after each round of work keeps RSS where the live data is.
No-ops where the C library is not glibc.
"""
from __future__ import annotations

import ctypes
import ctypes.util

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 128 * 1024   # glibc's own starting value


def _libc():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None
    except OSError:
        return None


_LIBC = _libc()


def fix_thresholds() -> bool:
    """Blocks of 128 KiB and more always come from mmap and go back to the OS when freed; the top
    of the heap is given back above 128 KiB free. True when glibc took both settings."""
    if _LIBC is None:
        return False
    return bool(_LIBC.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and \
        bool(_LIBC.mallopt(M_TRIM_THRESHOLD, MMAP_THRESHOLD_BYTES))


def trim() -> bool:
    """Give the heap's free pages back to the OS (glibc's malloc_trim); True if any were."""
    return bool(_LIBC.malloc_trim(0)) if _LIBC is not None else False
