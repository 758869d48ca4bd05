"""Value types: what the index stores per chunk and what a search returns."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

__all__ = ["ChunkRecord", "Hit", "PartitionHits"]


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
    # The retrievers' own scores (cosine, BM25; None when that retriever did not return
    # it), kept only for a partition's search, whose hits are fused again with the other
    # partitions' (reachstore_server/query/shards/partial.py).
    dense: float | None = None
    lexical: float | None = None


class PartitionHits(list[Hit]):
    """The hits of one partition's search, with the scores of every candidate each of its
    retrievers considered (best first): how another member places these hits among the
    other partitions' (reachstore_server/query/shards/partial.py)."""

    def __init__(
        self,
        hits: Iterable[Hit] = (),
        dense: Sequence[float] | np.ndarray = (),
        lexical: Sequence[float] | np.ndarray = (),
    ) -> None:
        super().__init__(hits)
        self.dense_scores = np.asarray(dense, dtype=np.float64)
        self.lexical_scores = np.asarray(lexical, dtype=np.float64)
