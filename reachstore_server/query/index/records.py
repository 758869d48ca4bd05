"""Value types: what the index stores per chunk and what a search returns."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["ChunkRecord", "Hit"]


@dataclass(frozen=True, eq=False, slots=True)
class ChunkRecord:
    """One chunk as the index keeps it (the database is the truth; this is a copy).

    ``vector`` is the chunk's 512-dim float32 unit vector. Records handed out by the
    index share memory with it and are read-only.
    """

    chunk_id: int
    document_id: str
    chunk_index: int
    text: str
    metadata: dict[str, str]
    content_hash: str
    vector: np.ndarray


@dataclass(frozen=True, slots=True)
class Hit:
    """One search result. ``score`` is the fused reciprocal-rank-fusion score (higher is
    better); it depends only on ranks, so hits of different namespaces compare."""

    chunk_id: int
    document_id: str
    chunk_index: int
    text: str
    metadata: dict[str, str] = field(hash=False)
    content_hash: str
    score: float
