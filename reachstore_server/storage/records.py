"""Plain records the store hands out: no ORM objects leave the storage package."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Sequence


@dataclasses.dataclass(frozen=True)
class NamespaceInfo:
    id: int
    name: str
    embedding_model: str
    dimension: int
    change_seq: int
    created_at: dt.datetime
    document_count: int = 0
    chunk_count: int = 0
    # Partitions searches are routed to, and partitions being loaded (docs/SHARDS.md).
    partitions: int = 1
    partitions_next: int = 1


@dataclasses.dataclass(frozen=True)
class DocumentInfo:
    namespace: str
    document_id: str
    text: str
    metadata: dict[str, str]
    chunk_count: int
    content_sha256: str
    updated_at: dt.datetime


@dataclasses.dataclass(frozen=True)
class ChunkData:
    """A chunk ready to be stored: its text, content hash and float32 vector bytes."""

    text: str
    content_hash: str
    embedding: bytes


@dataclasses.dataclass(frozen=True)
class DocumentVersion:
    """A document ready to be committed: what replaces it, and the stored row it replaces
    (``row_id``; None for a document the namespace does not hold)."""

    namespace_id: int
    document_id: str
    text: str
    metadata: dict[str, str]
    content_sha256: str
    chunks: Sequence[ChunkData]
    row_id: int | None = None


@dataclasses.dataclass(frozen=True)
class StoredChunk:
    id: int
    document_id: str
    chunk_index: int
    text: str
    content_hash: str
    embedding: bytes
    metadata: dict[str, str]


@dataclasses.dataclass(frozen=True)
class Usage:
    """A tenant's use of the size quotas, for one namespace."""

    namespaces: int
    documents: int  # in the namespace, stored or queued
    stored_bytes: int  # in the whole tenant, stored or queued
