"""The tables of the semantic store: the source of truth every index is derived from.

Every table that holds tenant data carries ``tenant``; the repository functions in this
package are the only code that queries these tables, and each one filters on it.
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import (
    BigInteger,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

# SQLite only auto-increments a column declared exactly INTEGER PRIMARY KEY, and only
# AUTOINCREMENT stops it from reusing the ids of deleted rows: a re-created namespace must
# never inherit the old one's id (its index snapshot is filed under it).
BigId = BigInteger().with_variant(Integer(), "sqlite")
NO_ID_REUSE = {"sqlite_autoincrement": True}

TENANT_LEN = 64
NAME_LEN = 64
DOC_ID_LEN = 128


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class Base(DeclarativeBase):
    pass


class NamespaceRow(Base):
    """A namespace. ``change_seq`` rises by one with every document change, so a query
    replica knows its index is current when its seq equals this one."""

    __tablename__ = "namespaces"
    __table_args__ = (
        UniqueConstraint("tenant", "name", name="uq_namespaces_tenant_name"),
        NO_ID_REUSE,
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    tenant: Mapped[str] = mapped_column(String(TENANT_LEN))
    name: Mapped[str] = mapped_column(String(NAME_LEN))
    embedding_model: Mapped[str] = mapped_column(String(128))
    dimension: Mapped[int] = mapped_column(Integer)
    change_seq: Mapped[int] = mapped_column(BigInteger, default=0)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    # How many partitions the query tier routes searches of it to, and how many it is
    # loading (ahead only while a split warms): docs/SHARDS.md, "Partitions".
    partitions: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    partitions_next: Mapped[int] = mapped_column(Integer, default=1, server_default="1")


class DocumentRow(Base):
    """The searchable version of a document."""

    __tablename__ = "documents"
    __table_args__ = (
        UniqueConstraint("namespace_id", "document_id", name="uq_documents_namespace_doc"),
        NO_ID_REUSE,
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    tenant: Mapped[str] = mapped_column(String(TENANT_LEN))
    namespace_id: Mapped[int] = mapped_column(ForeignKey("namespaces.id", ondelete="CASCADE"))
    document_id: Mapped[str] = mapped_column(String(DOC_ID_LEN))
    text: Mapped[str] = mapped_column(Text)
    metadata_json: Mapped[str] = mapped_column(Text, default="{}")
    content_sha256: Mapped[str] = mapped_column(String(64))
    text_bytes: Mapped[int] = mapped_column(BigInteger)
    chunk_count: Mapped[int] = mapped_column(Integer)
    updated_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class ChunkRow(Base):
    """One chunk with its embedding. ``id`` is also the vector's id in the derived index."""

    __tablename__ = "chunks"
    __table_args__ = (Index("ix_chunks_namespace_doc", "namespace_id", "document_id"), NO_ID_REUSE)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    tenant: Mapped[str] = mapped_column(String(TENANT_LEN))
    namespace_id: Mapped[int] = mapped_column(ForeignKey("namespaces.id", ondelete="CASCADE"))
    document_row_id: Mapped[int] = mapped_column(ForeignKey("documents.id", ondelete="CASCADE"))
    document_id: Mapped[str] = mapped_column(String(DOC_ID_LEN))
    chunk_index: Mapped[int] = mapped_column(Integer)
    text: Mapped[str] = mapped_column(Text)
    content_hash: Mapped[str] = mapped_column(String(64))
    embedding: Mapped[bytes] = mapped_column(LargeBinary)


class ChangeRow(Base):
    """One document change of a namespace, in ``seq`` order: what a replica replays to
    bring its index from its seq up to the namespace's."""

    __tablename__ = "namespace_changes"
    __table_args__ = (Index("ix_changes_namespace_seq", "namespace_id", "seq"), NO_ID_REUSE)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    tenant: Mapped[str] = mapped_column(String(TENANT_LEN))
    namespace_id: Mapped[int] = mapped_column(ForeignKey("namespaces.id", ondelete="CASCADE"))
    seq: Mapped[int] = mapped_column(BigInteger)
    document_id: Mapped[str] = mapped_column(String(DOC_ID_LEN))
    kind: Mapped[str] = mapped_column(String(16))  # "upsert" | "delete"


class TaskRow(Base):
    """A durable ingest task. It holds the submitted document until it is indexed, so
    nothing accepted is lost when the ingest service stops."""

    __tablename__ = "ingest_tasks"
    __table_args__ = (Index("ix_tasks_state_created", "state", "created_at"),)

    task_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(TENANT_LEN))
    namespace: Mapped[str] = mapped_column(String(256))
    document_id: Mapped[str] = mapped_column(String(DOC_ID_LEN))
    text: Mapped[str | None] = mapped_column(Text, nullable=True)
    # UTF-8 size of the submitted text, for the stored-bytes quota while the task is queued.
    text_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    metadata_json: Mapped[str] = mapped_column(Text, default="{}")
    on_duplicate: Mapped[str] = mapped_column(String(16))
    # The API key that submitted the task (empty for the local caller): its own tasks stay
    # visible to a key even outside its namespace grants.
    submitted_by: Mapped[str] = mapped_column(String(32), default="")
    state: Mapped[str] = mapped_column(String(16))
    phase: Mapped[str] = mapped_column(String(16), default="")
    percent: Mapped[int] = mapped_column(Integer, default=0)
    error_code: Mapped[str] = mapped_column(String(64), default="")
    error_message: Mapped[str] = mapped_column(Text, default="")
    error_data_json: Mapped[str] = mapped_column(Text, default="{}")
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    # The lease of the ingest process working on the task (see ``tasks.py``): who holds it
    # (or last held it; empty while it was never claimed) and until when, by the database's
    # clock. Added after the first release: nullable or with a server default.
    lease_owner: Mapped[str] = mapped_column(String(64), default="", server_default="")
    lease_until: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class ApiKeyRow(Base):
    """An API key. Only a SHA-256 of its secret is kept: the secret is shown once."""

    __tablename__ = "api_keys"

    key_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(TENANT_LEN), index=True)
    name: Mapped[str] = mapped_column(String(128), default="")
    secret_sha256: Mapped[str] = mapped_column(String(64))
    scopes_json: Mapped[str] = mapped_column(Text)
    namespaces_json: Mapped[str] = mapped_column(Text, default="[]")
    # Added after the first release: server defaults fill them in older databases.
    channels_json: Mapped[str] = mapped_column(Text, default="[]", server_default="[]")
    groups_json: Mapped[str] = mapped_column(Text, default="[]", server_default="[]")
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    expires_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    revoked_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class RateBucketRow(Base):
    """A call-rate token bucket every process of the deployment shares: a key's, a
    tenant's or a namespace's (``reachstore_server/storage/rate_buckets.py``). ``version`` makes
    each update a compare-and-set, so two processes never both take the last token."""

    __tablename__ = "rate_buckets"

    # The bucket's name ("query/key/<key id>"), or its SHA-256 when the name is longer.
    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    tokens: Mapped[float] = mapped_column(Float)
    stamp: Mapped[float] = mapped_column(Float)  # epoch seconds of the last refill
    version: Mapped[int] = mapped_column(Integer, default=0)


class QueryMemberRow(Base):
    """A query process that holds namespace shards (``reachstore_server/query/shards/``):
    where others reach it, whether it takes traffic yet, and when it last said it was alive
    (by the database's clock). A row whose heartbeat is older than the lease is a member
    that died; any member deletes it."""

    __tablename__ = "query_members"

    member_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    # host:port of its gRPC server, as the other members dial it.
    address: Mapped[str] = mapped_column(String(255))
    # "warming" while it loads the indexes it will own, then "serving".
    state: Mapped[str] = mapped_column(String(16))
    started_at: Mapped[float] = mapped_column(Float)
    heartbeat_at: Mapped[float] = mapped_column(Float)
    # JSON list of the namespaces (shard keys) placed on it whose index it is still loading:
    # the others list it as moving there, not as an owner taking searches, until it is done.
    loading: Mapped[str] = mapped_column(Text, default="[]", server_default="[]")
