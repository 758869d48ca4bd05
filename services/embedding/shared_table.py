"""The model's 62 MiB embedding table in one file that every query process maps.

Each query process loads the model from its package, which puts a private copy of the
token table (130,000 rows of 512 quantized bytes) in its anonymous memory: two query
processes held two copies. Written once to a file under the data folder and mapped
read-only, the table lives in the page cache once, however many processes map it (and
the CPU caches see one copy too).

The file is trusted no further than it is checked: a process compares the mapped table
with the one it loaded before letting go of its own, and rewrites the file (atomically,
beside it, then renamed) when they differ or it is missing, so a stale, truncated or
edited file costs one rewrite, never a wrong vector.
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)

__all__ = ["mapped_copy"]


def mapped_copy(table: np.ndarray, path: Path) -> np.ndarray:
    """A read-only mapping of ``path`` holding exactly ``table``, writing the file first
    when it does not hold it. Returns ``table`` itself when the folder cannot be written."""
    mapped = _map(path, table)
    if mapped is not None:
        return mapped
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                np.save(f, table, allow_pickle=False)
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
    except OSError as exc:
        log.warning("embedding table not shared (%s): this process keeps its own copy", exc)
        return table
    mapped = _map(path, table)
    if mapped is None:  # replaced meanwhile by something else: keep our own copy
        log.warning("embedding table at %s changed while being shared; not shared", path)
        return table
    return mapped


def _map(path: Path, table: np.ndarray) -> np.ndarray | None:
    """The mapping when ``path`` holds ``table`` exactly, else None."""
    try:
        mapped = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError):
        return None
    if mapped.shape != table.shape or mapped.dtype != table.dtype:
        return None
    if not np.array_equal(mapped, table):
        return None
    return mapped
