"""One namespace's in-memory index: dense + BM25 + chunk records, hybrid search."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence

import numpy as np

from .cancel import CancelToken
from .dense import (
    EF_SEARCH,
    HNSW_THRESHOLD,
    MAX_TOMBSTONE_RATIO,
    SMALL_SUBSET,
    DenseIndex,
)
from .lexical import LexicalIndex, TermStats
from .records import ChunkRecord, Hit, PartitionHits
from .rwlock import ReadWriteLock
from .snapshot import SnapshotCorrupt, decode_snapshot, encode_snapshot

__all__ = ["NamespaceIndex", "RRF_K", "candidate_count"]

# Reciprocal rank fusion constant (Cormack, Clarke & Buettcher 2009; the usual 60).
RRF_K = 60


def candidate_count(top_k: int) -> int:
    """How many candidates each retriever contributes to the fusion."""
    return max(4 * top_k, 50)


class NamespaceIndex:
    """Dense + lexical index of one namespace, rebuilt from the database at will.

    Thread safety: any number of concurrent ``search`` calls; writes (``upsert_document``,
    ``remove_document``) are serialised among themselves by a mutex and against searches
    by a readers-writer lock, which a write holds only while it mutates. The slow part
    of a dense rebuild (HNSW graph build: ~0.6 s at 10,000 vectors, ~6.5 s at 50,000)
    runs under the writer mutex only, so searches continue on the old structure
    meanwhile; the swap is instantaneous.
    """

    def __init__(
        self,
        dim: int = 512,
        *,
        hnsw_threshold: int = HNSW_THRESHOLD,
        ef_search: int = EF_SEARCH,
        max_tombstone_ratio: float = MAX_TOMBSTONE_RATIO,
        small_subset: int = SMALL_SUBSET,
        k1: float = 1.2,
        b: float = 0.75,
    ) -> None:
        self.dim = int(dim)
        self._dense = DenseIndex(
            self.dim,
            hnsw_threshold=hnsw_threshold,
            ef_search=ef_search,
            max_tombstone_ratio=max_tombstone_ratio,
            small_subset=small_subset,
            auto_rebuild=False,  # rebuilt here in two phases, see _rebuild_dense_if_due
        )
        self._lexical = LexicalIndex(k1=k1, b=b)
        self._records: dict[int, ChunkRecord] = {}
        self._documents: dict[str, list[int]] = {}
        self._by_meta: dict[tuple[str, str], set[int]] = {}
        self._lock = ReadWriteLock()  # searches (shared) vs. mutations (exclusive)
        self._writer = threading.Lock()  # one writer at a time, for a whole write

    # ---- counts and reads -----------------------------------------------------------

    @property
    def document_count(self) -> int:
        return len(self._documents)

    @property
    def chunk_count(self) -> int:
        return len(self._records)

    @property
    def dense_mode(self) -> str:
        """``"flat"`` or ``"hnsw"`` (see ``dense.py``)."""
        return self._dense.mode

    def has_document(self, document_id: str) -> bool:
        return document_id in self._documents

    def document_chunks(self, document_id: str) -> list[ChunkRecord]:
        """The document's chunk records in order ([] if unknown). Vectors are read-only."""
        with self._lock.read():
            return [self._records[cid] for cid in self._documents.get(document_id, ())]

    # ---- writes ---------------------------------------------------------------------

    def upsert_document(self, document_id: str, chunks: Sequence[ChunkRecord]) -> None:
        """Make ``chunks`` the document's complete set of chunks (old ones are removed).

        An empty list keeps the document (with no chunks). Everything is validated
        before the index changes, so a bad call leaves the index as it was. Chunks
        whose id, text and vector are unchanged keep their index entries (only the
        record is replaced), so re-ingesting an unchanged document is cheap and leaves
        no HNSW tombstones.
        """
        if not isinstance(document_id, str):
            raise TypeError("document_id must be a str")
        new = [self._validated(document_id, c) for c in chunks]
        ids = [rec.chunk_id for rec in new]
        if len(set(ids)) != len(ids):
            raise ValueError(f"duplicate chunk ids in document {document_id!r}")
        with self._writer:
            self._upsert_locked(document_id, new, ids)
            self._rebuild_dense_if_due()

    def _upsert_locked(self, document_id: str, new: list[ChunkRecord], ids: list[int]) -> None:
        with self._lock.write():
            for rec in new:
                owner = self._records.get(rec.chunk_id)
                if owner is not None and owner.document_id != document_id:
                    raise ValueError(
                        f"chunk id {rec.chunk_id} belongs to document {owner.document_id!r}"
                    )
            old_ids = self._documents.get(document_id, [])
            keep: set[int] = set()
            for i, rec in enumerate(new):
                old = self._records.get(rec.chunk_id)
                if (
                    old is not None
                    and old.text == rec.text
                    and np.array_equal(old.vector, rec.vector)
                ):
                    keep.add(rec.chunk_id)
                    new[i] = _with_vector(rec, old.vector)  # share the indexed copy
            gone = [cid for cid in old_ids if cid not in keep]
            self._dense.remove(gone)
            for cid in old_ids:
                self._unindex_metadata(self._records[cid])
                if cid not in keep:
                    self._lexical.remove(cid)
                del self._records[cid]
            added = [i for i, rec in enumerate(new) if rec.chunk_id not in keep]
            if added:
                # One read-only array shared by the records and the dense index.
                batch = np.stack([new[i].vector for i in added])
                batch.flags.writeable = False
                for row, i in enumerate(added):
                    new[i] = _with_vector(new[i], batch[row])
                self._dense.add(
                    np.asarray([new[i].chunk_id for i in added], dtype=np.int64), batch, copy=False
                )
                for i in added:
                    self._lexical.add(new[i].chunk_id, new[i].text)
            for rec in new:
                self._records[rec.chunk_id] = rec
                self._index_metadata(rec)
            self._documents[document_id] = ids

    def remove_document(self, document_id: str) -> bool:
        """Drop the document and its chunks; returns False if it was not indexed."""
        with self._writer:
            with self._lock.write():
                ids = self._documents.pop(document_id, None)
                if ids is None:
                    return False
                self._dense.remove(ids)
                for cid in ids:
                    self._lexical.remove(cid)
                    self._unindex_metadata(self._records.pop(cid))
            self._rebuild_dense_if_due()
            return True

    def _rebuild_dense_if_due(self) -> None:
        """Rebuild the dense structure if it asks for it (caller holds ``_writer``).

        Build while searches run (the build only reads, and no write can intervene),
        then swap under the exclusive lock.
        """
        if self._dense.rebuild_due:
            replacement = self._dense.build_replacement()
            with self._lock.write():
                self._dense.install(replacement)

    def _validated(self, document_id: str, rec: ChunkRecord) -> ChunkRecord:
        if not isinstance(rec, ChunkRecord):
            raise TypeError("chunks must be ChunkRecord instances")
        if rec.document_id != document_id:
            raise ValueError(
                f"chunk {rec.chunk_id} has document_id {rec.document_id!r}, not {document_id!r}"
            )
        if not isinstance(rec.text, str) or not isinstance(rec.content_hash, str):
            raise TypeError("text and content_hash must be str")
        if not isinstance(rec.metadata, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in rec.metadata.items()
        ):
            raise TypeError("metadata must map str to str")
        vec = np.asarray(rec.vector, dtype=np.float32)
        if vec.shape != (self.dim,):
            raise ValueError(
                f"chunk {rec.chunk_id}: vector shape {vec.shape}, expected ({self.dim},)"
            )
        if not np.isfinite(vec).all():
            raise ValueError(f"chunk {rec.chunk_id}: vector has non-finite values")
        return ChunkRecord(
            chunk_id=int(rec.chunk_id),
            document_id=document_id,
            chunk_index=int(rec.chunk_index),
            text=rec.text,
            metadata=dict(rec.metadata),
            content_hash=rec.content_hash,
            vector=vec,
        )

    def _index_metadata(self, rec: ChunkRecord) -> None:
        for item in rec.metadata.items():
            self._by_meta.setdefault(item, set()).add(rec.chunk_id)

    def _unindex_metadata(self, rec: ChunkRecord) -> None:
        for item in rec.metadata.items():
            ids = self._by_meta.get(item)
            if ids is not None:
                ids.discard(rec.chunk_id)
                if not ids:
                    del self._by_meta[item]

    # ---- search ---------------------------------------------------------------------

    def term_stats(self, query_text: str) -> TermStats:
        """The index's BM25 statistics for the query's terms (see ``lexical.py``)."""
        with self._lock.read():
            return self._lexical.term_stats(query_text)

    def search(
        self,
        query_vector: np.ndarray | None,
        query_text: str,
        top_k: int,
        filter: Mapping[str, str] | None = None,
        cancel: CancelToken | None = None,
        raw: bool = False,
        lexical_stats: TermStats | None = None,
    ) -> list[Hit]:
        """Hybrid search: dense top N and BM25 top N (N = max(4*top_k, 50)), fused with
        reciprocal rank fusion, de-duplicated by content hash, cut to ``top_k``.

        ``filter`` keeps chunks whose metadata equals every given key/value.
        ``query_vector=None`` or an empty ``query_text`` drops that retriever.
        Raises :class:`SearchCancelled` when ``cancel`` is cancelled or past its
        deadline; the token is checked between stages and inside the retrievers' loops.

        Scores: a hit's score is ``sum(1 / (60 + rank))`` over the retrievers that
        returned it (rank from 1). It depends only on ranks, not on raw cosine or BM25
        values (BM25 values depend on each namespace's statistics and are not
        comparable across namespaces), so the scores of different namespaces are on
        one scale and can be merged by value (see ``merge.py``). The top hit found by
        both retrievers scores 2/61 ~= 0.0328 in every namespace.

        ``raw``: the index of one partition of a namespace is searched so. Each hit keeps
        its cosine and BM25 score (``Hit.dense``, ``Hit.lexical``), and the answer is a
        :class:`PartitionHits` with the scores of every candidate of each retriever, by
        which its hits are fused again with those of the other partitions.
        ``lexical_stats``: the whole namespace's BM25 statistics for the query, which a
        partition's index scores with instead of its own (``lexical.py``).
        """
        if top_k < 1:
            raise ValueError("top_k must be >= 1")
        if cancel is None:
            cancel = CancelToken()
        cancel.check()
        q: np.ndarray | None = None
        if query_vector is not None:
            q = np.asarray(query_vector, dtype=np.float32).reshape(-1)
            if q.shape != (self.dim,):
                raise ValueError(f"query vector has shape {q.shape}, expected ({self.dim},)")
        n = candidate_count(top_k)
        with self._lock.read(cancel):
            allowed = self._allowed(filter)
            if allowed is not None and not allowed:
                return PartitionHits() if raw else []
            none = np.zeros(0, dtype=np.int64)
            raw_dense: dict[int, float] = {}
            raw_lexical: dict[int, float] = {}
            if raw:
                if q is not None:
                    raw_dense = dict(self._dense.search(q, n, allowed, cancel))
                cancel.check()
                if query_text:
                    raw_lexical = dict(
                        self._lexical.search(query_text, n, allowed, cancel, lexical_stats)
                    )
                dense = np.fromiter(raw_dense, dtype=np.int64, count=len(raw_dense))
                lexical = np.fromiter(raw_lexical, dtype=np.int64, count=len(raw_lexical))
            else:
                dense = self._dense.ranked_ids(q, n, allowed, cancel) if q is not None else none
                cancel.check()
                lexical = (
                    self._lexical.ranked_ids(query_text, n, allowed, cancel, lexical_stats)
                    if query_text
                    else none
                )
            cancel.check()
            fused_ids, fused_scores = _rrf((dense, lexical))
            hits: list[Hit] = []
            seen_hashes: set[str] = set()
            for cid, score in zip(fused_ids.tolist(), fused_scores.tolist(), strict=True):
                rec = self._records[cid]
                key = rec.content_hash or f"\x00chunk:{cid}"  # no hash: never a duplicate
                if key in seen_hashes:
                    continue
                seen_hashes.add(key)
                hits.append(
                    Hit(
                        chunk_id=rec.chunk_id,
                        document_id=rec.document_id,
                        chunk_index=rec.chunk_index,
                        text=rec.text,
                        metadata=dict(rec.metadata),
                        content_hash=rec.content_hash,
                        score=score,
                        dense=raw_dense.get(cid),
                        lexical=raw_lexical.get(cid),
                    )
                )
                if len(hits) == top_k:
                    break
        if raw:
            return PartitionHits(hits, list(raw_dense.values()), list(raw_lexical.values()))
        return hits

    def _allowed(self, filter: Mapping[str, str] | None) -> set[int] | None:
        """Chunk ids matching every key of ``filter`` (None: no filter). May return the
        metadata index's own set: read it only, under the read lock."""
        if not filter:
            return None
        sets = []
        for item in filter.items():
            ids = self._by_meta.get(item)
            if not ids:
                return set()
            sets.append(ids)
        if len(sets) == 1:
            return sets[0]
        sets.sort(key=len)
        return sets[0].intersection(*sets[1:])

    # ---- snapshots ------------------------------------------------------------------

    def snapshot(self, seq: int) -> bytes:
        """A self-contained binary snapshot (see ``snapshot.py``) tagged with ``seq``,
        the caller's position in the change stream the snapshot reflects."""
        with self._lock.read():
            docs = [
                (doc_id, [self._records[cid] for cid in ids])
                for doc_id, ids in self._documents.items()
            ]
            return encode_snapshot(self.dim, seq, docs)

    @classmethod
    def from_snapshot(
        cls, data: bytes | bytearray | memoryview, **config: object
    ) -> tuple[NamespaceIndex, int]:
        """Rebuild an index from :meth:`snapshot` bytes; returns ``(index, seq)``.

        ``config`` are constructor keywords (thresholds are not part of the snapshot).
        Raises :class:`SnapshotCorrupt`; never returns a partly built index.
        """
        contents = decode_snapshot(data)
        index = cls(contents.dim, **config)  # type: ignore[arg-type]
        try:
            index._load(contents.documents)
        except (ValueError, TypeError) as exc:
            raise SnapshotCorrupt(f"records rejected: {exc}") from None
        return index, contents.seq

    def _load(self, documents: list[tuple[str, list[ChunkRecord]]]) -> None:
        """Bulk load into an empty index (one dense add, so a large namespace builds its
        HNSW graph once instead of switching part-way)."""
        records: list[ChunkRecord] = []
        for doc_id, chunks in documents:
            recs = [self._validated(doc_id, c) for c in chunks]
            self._documents[doc_id] = [r.chunk_id for r in recs]
            records.extend(recs)
        if records:
            batch = np.stack([r.vector for r in records])
            batch.flags.writeable = False
            records = [_with_vector(r, batch[i]) for i, r in enumerate(records)]
        for rec in records:
            if rec.chunk_id in self._records:
                raise ValueError(f"chunk id {rec.chunk_id} appears twice")
            self._records[rec.chunk_id] = rec
            self._index_metadata(rec)
        if records:
            self._dense.bulk_load(
                np.asarray([r.chunk_id for r in records], dtype=np.int64), batch, copy=False
            )
        for rec in records:
            self._lexical.add(rec.chunk_id, rec.text)

    def __repr__(self) -> str:
        return (
            f"NamespaceIndex(dim={self.dim}, documents={self.document_count}, "
            f"chunks={self.chunk_count}, dense={self.dense_mode})"
        )


def _with_vector(rec: ChunkRecord, vector: np.ndarray) -> ChunkRecord:
    return ChunkRecord(
        chunk_id=rec.chunk_id,
        document_id=rec.document_id,
        chunk_index=rec.chunk_index,
        text=rec.text,
        metadata=rec.metadata,
        content_hash=rec.content_hash,
        vector=vector,
    )


def _rrf(rankings: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Reciprocal rank fusion of rankings given as arrays of ids (best first): the fused
    ids, score desc, ties broken by best single rank, then chunk id, and their scores.
    In numpy: in the query service's profile the fusion in Python (a dict per query and
    namespace, a tuple per hit of each retriever) cost more than BM25's scoring."""
    ids = np.concatenate(rankings)
    if len(ids) == 0:
        return ids, np.zeros(0, dtype=np.float64)
    ranks = np.concatenate([np.arange(1, len(r) + 1, dtype=np.int64) for r in rankings])
    unique, where = np.unique(ids, return_inverse=True)
    fused = np.bincount(where, weights=1.0 / (RRF_K + ranks), minlength=len(unique))
    best = np.full(len(unique), np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(best, where, ranks)
    order = np.lexsort((unique, best, -fused))
    return unique[order], fused[order]
