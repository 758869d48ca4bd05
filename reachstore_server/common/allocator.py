"""Giving the memory of large, short-lived buffers back to the system.

glibc serves a request of at least its mmap threshold (128 KiB at start) with a mapping
of its own, unmapped when freed. But each time such a block is freed the threshold rises
to its size, up to 32 MiB: from then on blocks of that size come from the heap, and a
heap freed out of order keeps its pages. After 200 callers had each been sent a 6 MiB
answer, the bridge stayed at 820 MiB with every answer freed; with the threshold fixed at
1 MiB it went back to 173 MiB (tests/e2e/test_attack18_bridge_unread_answers.py).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)

_M_MMAP_THRESHOLD = -3  # glibc's malloc.h
LARGE_BYTES = 1024 * 1024


def map_large_blocks(threshold: int = LARGE_BYTES) -> bool:
    """Blocks of at least ``threshold`` bytes get mappings of their own, for good (setting
    the threshold stops glibc from raising it). False where the C library is not glibc."""
    name = ctypes.util.find_library("c")
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError, TypeError):
        log.info("no mallopt in the C library %s: large blocks are left to it", name)
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, threshold))
