"""Giving the memory of a dropped index back to the operating system.

An index is many small Python objects (texts, metadata, BM25 postings) beside its vector
blocks. When a member drops a namespace placed elsewhere (docs/SHARDS.md), the objects are
freed, but glibc's allocator keeps the freed pages for later use: measured on the shared
corpus, a member that had loaded four namespaces and dropped two kept the RSS of all four
(bench/bench_shards.py), so the memory shards exist to save was never saved.
``malloc_trim`` hands free pages back, wherever they are in the heap. It costs milliseconds,
and runs only when an index is dropped.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging

log = logging.getLogger(__name__)


def _malloc_trim() -> object | None:
    name = ctypes.util.find_library("c")
    try:
        return getattr(ctypes.CDLL(name), "malloc_trim", None) if name else None
    except OSError:
        return None


_TRIM = _malloc_trim()


def give_back() -> bool:
    """Collects unreachable cycles, then returns free heap pages to the system. False where
    the C library has no ``malloc_trim`` (musl, macOS): there the freed memory is reused
    by later indexes but the RSS stays."""
    gc.collect()
    if _TRIM is None:
        return False
    _TRIM(0)  # type: ignore[operator]
    return True
