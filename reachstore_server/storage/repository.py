"""Tenant-scoped reads and writes of namespaces, documents, chunks and changes.

Every function takes the tenant and filters on it; handlers never build queries of their
own, so a bug in a handler cannot reach another tenant's rows.
"""

from __future__ import annotations

import collections
import json
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from typing import cast

from sqlalchemy import Table, bindparam, delete, func, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from reachstore_server.storage.heads import NamespaceHeads
from reachstore_server.storage.models import (
    ChangeRow,
    ChunkRow,
    DocumentRow,
    NamespaceRow,
    TaskRow,
    utcnow,
)
from reachstore_server.storage.records import (
    ChunkData,
    DocumentInfo,
    DocumentVersion,
    NamespaceInfo,
    StoredChunk,
    Usage,
)

# The tables themselves, for Core statements: no ORM unit of work on the ingest's path.
_DOCUMENTS = cast(Table, DocumentRow.__table__)
_CHUNKS = cast(Table, ChunkRow.__table__)
_CHANGES = cast(Table, ChangeRow.__table__)


class NamespaceExists(Exception):
    pass


def _ns_info(row: NamespaceRow, documents: int = 0, chunks: int = 0) -> NamespaceInfo:
    return NamespaceInfo(
        row.id,
        row.name,
        row.embedding_model,
        row.dimension,
        row.change_seq,
        row.created_at,
        documents,
        chunks,
        partitions=row.partitions,
        partitions_next=row.partitions_next,
    )


class SemanticStore:
    """The store's operations. One instance per process, shared by threads."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self._sessions = sessions
        self._heads = NamespaceHeads(sessions.kw["bind"])

    # --- namespaces ---------------------------------------------------------------------

    def create_namespace(self, tenant: str, name: str, model: str, dimension: int) -> NamespaceInfo:
        row = NamespaceRow(
            tenant=tenant,
            name=name,
            embedding_model=model,
            dimension=dimension,
            change_seq=0,
            created_at=utcnow(),
        )
        try:
            with self._sessions.begin() as session:
                session.add(row)
        except IntegrityError:
            raise NamespaceExists(name) from None
        return _ns_info(row)

    def _counts(self, session: Session, namespace_ids: Sequence[int]) -> dict[int, tuple[int, int]]:
        if not namespace_ids:
            return {}
        docs = dict(
            session.execute(
                select(DocumentRow.namespace_id, func.count())
                .where(DocumentRow.namespace_id.in_(namespace_ids))
                .group_by(DocumentRow.namespace_id)
            ).all()
        )
        chunks = dict(
            session.execute(
                select(
                    DocumentRow.namespace_id, func.coalesce(func.sum(DocumentRow.chunk_count), 0)
                )
                .where(DocumentRow.namespace_id.in_(namespace_ids))
                .group_by(DocumentRow.namespace_id)
            ).all()
        )
        return {i: (int(docs.get(i, 0)), int(chunks.get(i, 0))) for i in namespace_ids}

    def get_namespace(self, tenant: str, name: str) -> NamespaceInfo | None:
        with self._sessions() as session:
            row = session.scalar(
                select(NamespaceRow).where(NamespaceRow.tenant == tenant, NamespaceRow.name == name)
            )
            if row is None:
                return None
            documents, chunks = self._counts(session, [row.id])[row.id]
            return _ns_info(row, documents, chunks)

    def list_namespaces(self, tenant: str, limit: int, after: str | None) -> list[NamespaceInfo]:
        with self._sessions() as session:
            stmt = select(NamespaceRow).where(NamespaceRow.tenant == tenant)
            if after is not None:
                stmt = stmt.where(NamespaceRow.name > after)
            rows = session.scalars(stmt.order_by(NamespaceRow.name).limit(limit)).all()
            counts = self._counts(session, [r.id for r in rows])
            return [_ns_info(r, *counts[r.id]) for r in rows]

    def namespace_names(self, tenant: str) -> list[str]:
        with self._sessions() as session:
            return list(
                session.scalars(
                    select(NamespaceRow.name)
                    .where(NamespaceRow.tenant == tenant)
                    .order_by(NamespaceRow.name)
                )
            )

    def namespace_heads(self, tenant: str, names: Sequence[str]) -> dict[str, NamespaceInfo]:
        """The current row of each named namespace that exists (no counts). On every
        query's path: see ``heads.py`` for how it stays cheap."""
        return self._heads.get(tenant, names)

    def all_namespaces(self) -> list[tuple[str, NamespaceInfo]]:
        """Every namespace of every tenant, for a query replica warming its indexes."""
        with self._sessions() as session:
            return [(r.tenant, _ns_info(r)) for r in session.scalars(select(NamespaceRow))]

    def split_namespace(self, namespace_id: int, count: int) -> bool:
        """Asks the query tier to load the namespace in ``count`` partitions (never fewer
        than it has); whether this call raised the count. Any member may ask: the first
        wins and the rest change nothing (docs/SHARDS.md, "Partitions")."""
        with self._sessions.begin() as session:
            moved = session.execute(
                update(NamespaceRow)
                .where(NamespaceRow.id == namespace_id, NamespaceRow.partitions_next < count)
                .values(partitions_next=count)
            )
            return bool(moved.rowcount)  # type: ignore[attr-defined]

    def route_partitions(self, namespace_id: int, count: int) -> bool:
        """Routes the namespace's searches to its ``count`` partitions, once they are
        loaded (the count must be the one being loaded); whether this call moved it."""
        with self._sessions.begin() as session:
            moved = session.execute(
                update(NamespaceRow)
                .where(
                    NamespaceRow.id == namespace_id,
                    NamespaceRow.partitions < count,
                    NamespaceRow.partitions_next == count,
                )
                .values(partitions=count)
            )
            return bool(moved.rowcount)  # type: ignore[attr-defined]

    def delete_namespace(self, tenant: str, name: str) -> bool:
        with self._sessions.begin() as session:
            row = session.scalar(
                select(NamespaceRow).where(NamespaceRow.tenant == tenant, NamespaceRow.name == name)
            )
            if row is None:
                return False
            # Children first, explicitly: SQLite only cascades with foreign_keys=ON, and
            # explicit deletes keep both engines doing the same thing.
            for model in (ChunkRow, ChangeRow, DocumentRow):
                session.execute(
                    delete(model).where(model.tenant == tenant, model.namespace_id == row.id)
                )
            session.delete(row)
            return True

    # --- documents ----------------------------------------------------------------------

    def get_document(self, tenant: str, namespace: str, document_id: str) -> DocumentInfo | None:
        with self._sessions() as session:
            row = session.scalar(
                select(DocumentRow)
                .join(NamespaceRow, NamespaceRow.id == DocumentRow.namespace_id)
                .where(
                    DocumentRow.tenant == tenant,
                    NamespaceRow.name == namespace,
                    DocumentRow.document_id == document_id,
                )
            )
            if row is None:
                return None
            return DocumentInfo(
                namespace,
                row.document_id,
                row.text,
                json.loads(row.metadata_json),
                row.chunk_count,
                row.content_sha256,
                row.updated_at,
            )

    def list_documents(
        self, tenant: str, namespace_id: int, namespace: str, limit: int, after: str | None
    ) -> list[DocumentInfo]:
        with self._sessions() as session:
            stmt = select(
                DocumentRow.document_id,
                DocumentRow.metadata_json,
                DocumentRow.chunk_count,
                DocumentRow.content_sha256,
                DocumentRow.updated_at,
            ).where(DocumentRow.tenant == tenant, DocumentRow.namespace_id == namespace_id)
            if after is not None:
                stmt = stmt.where(DocumentRow.document_id > after)
            rows = session.execute(stmt.order_by(DocumentRow.document_id).limit(limit)).all()
            return [
                DocumentInfo(namespace, r[0], "", json.loads(r[1]), r[2], r[3], r[4]) for r in rows
            ]

    def usage(self, tenant: str, namespace: str) -> Usage:
        """What counts against the size quotas: stored documents plus those accepted and
        still queued (so a burst of batches cannot slip past a quota before indexing)."""
        with self._sessions() as session:
            namespaces = session.scalar(
                select(func.count()).select_from(NamespaceRow).where(NamespaceRow.tenant == tenant)
            )
            stored_docs = session.scalar(
                select(func.count())
                .select_from(DocumentRow)
                .join(NamespaceRow, NamespaceRow.id == DocumentRow.namespace_id)
                .where(DocumentRow.tenant == tenant, NamespaceRow.name == namespace)
            )
            stored_bytes = session.scalar(
                select(func.coalesce(func.sum(DocumentRow.text_bytes), 0)).where(
                    DocumentRow.tenant == tenant
                )
            )
            queued = session.execute(
                select(
                    TaskRow.namespace,
                    func.count(),
                    func.coalesce(func.sum(TaskRow.text_bytes), 0),
                )
                .where(TaskRow.tenant == tenant, TaskRow.state.in_(["queued", "processing"]))
                .group_by(TaskRow.namespace)
            ).all()
        queued_docs = sum(count for name, count, _ in queued if name == namespace)
        queued_bytes = sum(int(size) for _, _, size in queued)
        return Usage(
            namespaces=int(namespaces or 0),
            documents=int(stored_docs or 0) + queued_docs,
            stored_bytes=int(stored_bytes or 0) + queued_bytes,
        )

    def existing_document_ids(self, tenant: str, namespace_id: int, ids: Sequence[str]) -> set[str]:
        with self._sessions() as session:
            return set(
                session.scalars(
                    select(DocumentRow.document_id).where(
                        DocumentRow.tenant == tenant,
                        DocumentRow.namespace_id == namespace_id,
                        DocumentRow.document_id.in_(list(ids)),
                    )
                )
            )

    def _bump_seq(self, session: Session, tenant: str, namespace_id: int, by: int = 1) -> int:
        """Takes the namespace's next ``by`` change seqs and returns the last; the UPDATE
        also serialises writers."""
        # One statement: both engines return the updated value (SQLite since 3.35).
        return session.execute(
            update(NamespaceRow)
            .where(NamespaceRow.tenant == tenant, NamespaceRow.id == namespace_id)
            .values(change_seq=NamespaceRow.change_seq + by)
            .returning(NamespaceRow.change_seq)
        ).scalar_one()

    def commit_document(
        self,
        session: Session,
        tenant: str,
        namespace_id: int,
        document_id: str,
        text: str,
        metadata: dict[str, str],
        content_sha256: str,
        chunks: Sequence[ChunkData],
        *,
        known_new: bool = False,
    ) -> None:
        """Makes a document version searchable, inside the caller's transaction: replaces
        the document and its chunks and records the change, all or nothing.
        ``known_new``: the caller has just found no such document in this transaction, so
        it is not looked up again (should one be committed meanwhile, the insert breaks
        the unique index and the transaction fails whole)."""
        row_id = None
        if not known_new:
            row_id = self.document_rows(session, tenant, namespace_id, [document_id]).get(
                document_id
            )
        version = DocumentVersion(
            namespace_id, document_id, text, metadata, content_sha256, chunks, row_id
        )
        self.commit_documents(session, tenant, [version])

    def commit_documents(
        self, session: Session, tenant: str, versions: Sequence[DocumentVersion]
    ) -> None:
        """Makes document versions searchable, inside the caller's transaction: each
        replaces its document's row (``row_id``, read in this transaction) or adds one,
        with its chunks, and records one change, all or nothing. A few statements for the
        lot, whatever their number: per-document statements were most of an ingest's own
        time. A document may appear once per call (the seqs follow ``versions``' order)."""
        if not versions:
            return
        keys = {(v.namespace_id, v.document_id) for v in versions}
        if len(keys) != len(versions):
            raise ValueError("a document appears more than once in one commit")
        counts = collections.Counter(v.namespace_id for v in versions)
        next_seq = {
            ns: self._bump_seq(session, tenant, ns, count) - count + 1
            for ns, count in counts.items()
        }
        now = utcnow()
        documents = _DOCUMENTS

        def values(v: DocumentVersion) -> dict[str, object]:
            return {
                "text": v.text,
                "metadata_json": json.dumps(v.metadata, ensure_ascii=False, sort_keys=True),
                "content_sha256": v.content_sha256,
                "text_bytes": len(v.text.encode()),
                "chunk_count": len(v.chunks),
                "updated_at": now,
            }

        replaced = [v for v in versions if v.row_id is not None]
        if replaced:
            session.execute(
                delete(ChunkRow).where(
                    ChunkRow.tenant == tenant,
                    ChunkRow.document_row_id.in_([v.row_id for v in replaced]),
                )
            )
            session.execute(
                update(documents)
                .where(documents.c.id == bindparam("row_id"), documents.c.tenant == tenant)
                .values({name: bindparam(f"new_{name}") for name in values(replaced[0])}),
                [
                    {"row_id": v.row_id, **{f"new_{k}": x for k, x in values(v).items()}}
                    for v in replaced
                ],
            )
        row_ids = {(v.namespace_id, v.document_id): v.row_id for v in replaced}
        added = [v for v in versions if v.row_id is None]
        if added:
            inserted = session.execute(
                insert(documents).returning(documents.c.id, sort_by_parameter_order=True),
                [
                    {
                        "tenant": tenant,
                        "namespace_id": v.namespace_id,
                        "document_id": v.document_id,
                        **values(v),
                    }
                    for v in added
                ],
            )
            for v, (row_id,) in zip(added, inserted, strict=True):
                row_ids[(v.namespace_id, v.document_id)] = row_id
        # Core executemany: building ORM objects per chunk costs more than the insert.
        chunk_rows = [
            {
                "tenant": tenant,
                "namespace_id": v.namespace_id,
                "document_row_id": row_ids[(v.namespace_id, v.document_id)],
                "document_id": v.document_id,
                "chunk_index": i,
                "text": c.text,
                "content_hash": c.content_hash,
                "embedding": c.embedding,
            }
            for v in versions
            for i, c in enumerate(v.chunks)
        ]
        if chunk_rows:
            session.execute(insert(_CHUNKS), chunk_rows)
        changes = []
        for v in versions:
            changes.append(
                {
                    "tenant": tenant,
                    "namespace_id": v.namespace_id,
                    "seq": next_seq[v.namespace_id],
                    "document_id": v.document_id,
                    "kind": "upsert",
                }
            )
            next_seq[v.namespace_id] += 1
        session.execute(insert(_CHANGES), changes)

    def document_rows(
        self, session: Session, tenant: str, namespace_id: int, document_ids: Sequence[str]
    ) -> dict[str, int]:
        """Which of ``document_ids`` the namespace holds, and their rows, read inside the
        caller's transaction."""
        if not document_ids:
            return {}
        found = session.execute(
            select(DocumentRow.document_id, DocumentRow.id).where(
                DocumentRow.tenant == tenant,
                DocumentRow.namespace_id == namespace_id,
                DocumentRow.document_id.in_(list(document_ids)),
            )
        )
        return {document_id: row_id for document_id, row_id in found}

    def namespaces_in(
        self, session: Session, tenant: str, names: Sequence[str]
    ) -> dict[str, NamespaceInfo]:
        """The namespace rows among ``names`` (absent ones left out), read inside the
        caller's transaction."""
        rows = session.execute(
            select(NamespaceRow).where(
                NamespaceRow.tenant == tenant, NamespaceRow.name.in_(list(names))
            )
        ).scalars()
        return {row.name: _ns_info(row) for row in rows}

    def namespace_in(self, session: Session, tenant: str, name: str) -> NamespaceInfo | None:
        """The namespace row, read inside the caller's transaction."""
        row = session.scalar(
            select(NamespaceRow).where(NamespaceRow.tenant == tenant, NamespaceRow.name == name)
        )
        return None if row is None else _ns_info(row)

    def document_exists(
        self, session: Session, tenant: str, namespace_id: int, document_id: str
    ) -> bool:
        found = session.scalar(
            select(DocumentRow.id).where(
                DocumentRow.tenant == tenant,
                DocumentRow.namespace_id == namespace_id,
                DocumentRow.document_id == document_id,
            )
        )
        return found is not None

    def delete_document(self, tenant: str, namespace_id: int, document_id: str) -> bool:
        with self._sessions.begin() as session:
            doc = session.scalar(
                select(DocumentRow).where(
                    DocumentRow.tenant == tenant,
                    DocumentRow.namespace_id == namespace_id,
                    DocumentRow.document_id == document_id,
                )
            )
            if doc is None:
                return False
            seq = self._bump_seq(session, tenant, namespace_id)
            session.execute(
                delete(ChunkRow).where(
                    ChunkRow.tenant == tenant, ChunkRow.document_row_id == doc.id
                )
            )
            session.delete(doc)
            session.add(
                ChangeRow(
                    tenant=tenant,
                    namespace_id=namespace_id,
                    seq=seq,
                    document_id=document_id,
                    kind="delete",
                )
            )
            return True

    # --- what a query replica replays ------------------------------------------------------

    def changed_documents(
        self, tenant: str, namespace_id: int, after_seq: int, upto_seq: int
    ) -> set[str]:
        with self._sessions() as session:
            return set(
                session.scalars(
                    select(ChangeRow.document_id)
                    .where(
                        ChangeRow.tenant == tenant,
                        ChangeRow.namespace_id == namespace_id,
                        ChangeRow.seq > after_seq,
                        ChangeRow.seq <= upto_seq,
                    )
                    .distinct()
                )
            )

    def chunks(
        self, tenant: str, namespace_id: int, document_ids: Sequence[str] | None = None
    ) -> Iterator[StoredChunk]:
        """Current chunks of a namespace (or of some of its documents), with metadata."""
        with self._sessions() as session:
            stmt = (
                select(
                    ChunkRow.id,
                    ChunkRow.document_id,
                    ChunkRow.chunk_index,
                    ChunkRow.text,
                    ChunkRow.content_hash,
                    ChunkRow.embedding,
                    DocumentRow.metadata_json,
                )
                .join(DocumentRow, DocumentRow.id == ChunkRow.document_row_id)
                .where(ChunkRow.tenant == tenant, ChunkRow.namespace_id == namespace_id)
            )
            if document_ids is not None:
                stmt = stmt.where(ChunkRow.document_id.in_(list(document_ids)))
            metadata_cache: dict[str, dict[str, str]] = {}
            for row in session.execute(
                stmt.order_by(ChunkRow.id).execution_options(yield_per=1000)
            ):
                metadata = metadata_cache.get(row[6])
                if metadata is None:
                    metadata = metadata_cache.setdefault(row[6], json.loads(row[6]))
                yield StoredChunk(row[0], row[1], row[2], row[3], row[4], bytes(row[5]), metadata)

    def session(self) -> Session:
        return self._sessions()

    def begin(self) -> AbstractContextManager[Session]:
        return self._sessions.begin()
