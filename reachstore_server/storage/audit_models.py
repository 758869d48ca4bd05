"""The audit tables: the chained events, each tenant's chain head, the signed checkpoints,
and the outbox every service writes its events to in the same transaction as its change.

``audit_events`` and ``audit_checkpoints`` are append-only: database triggers (made by the
migrations, ``reachstore_server/storage/migrations/versions/0001_baseline.py``) refuse UPDATE and
DELETE on them, so no code path of reachstore can rewrite them in place. The
triggers do not stop someone who owns the database; the hash chain and the signed
checkpoints make what such a person changes visible to ``Verify``.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Float, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from reachstore_server.storage.models import NO_ID_REUSE, TENANT_LEN, Base, BigId

HASH_LEN = 64
# An Ed25519 signature in hex; the HMAC checkpoints of older deployments use 64 of these.
SIGNATURE_LEN = 128


class AuditEventRow(Base):
    """One event at position ``seq`` of its tenant's chain. ``time`` is RFC 3339 text (it
    is hashed as stored, so no database can change its form) and ``params_json`` is the
    masked parameters' canonical JSON."""

    __tablename__ = "audit_events"
    __table_args__ = (
        UniqueConstraint("tenant", "seq", name="uq_audit_events_seq"),
        UniqueConstraint("event_id", name="uq_audit_events_event_id"),
        Index("ix_audit_events_hash", "tenant", "hash"),
        Index("ix_audit_events_time", "tenant", "time"),
        NO_ID_REUSE,
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    tenant: Mapped[str] = mapped_column(String(TENANT_LEN))
    seq: Mapped[int] = mapped_column(BigInteger)
    event_id: Mapped[str] = mapped_column(String(64))
    time: Mapped[str] = mapped_column(String(32))
    caller_key_id: Mapped[str] = mapped_column(String(32), default="")
    service: Mapped[str] = mapped_column(String(32))
    method: Mapped[str] = mapped_column(String(64))
    idempotency_key: Mapped[str] = mapped_column(String(512), default="")
    params_json: Mapped[str] = mapped_column(Text, default="{}")
    result_status: Mapped[str] = mapped_column(String(32))
    error_code: Mapped[str] = mapped_column(String(64), default="")
    category: Mapped[str] = mapped_column(String(16), default="")
    duration_ms: Mapped[int] = mapped_column(BigInteger, default=0)
    trace_id: Mapped[str] = mapped_column(String(32), default="")
    prev_hash: Mapped[str] = mapped_column(String(HASH_LEN))
    hash: Mapped[str] = mapped_column(String(HASH_LEN))


class AuditHeadRow(Base):
    """The last position and hash of a tenant's chain; appends lock it, one at a time."""

    __tablename__ = "audit_heads"

    tenant: Mapped[str] = mapped_column(String(TENANT_LEN), primary_key=True)
    seq: Mapped[int] = mapped_column(BigInteger)
    hash: Mapped[str] = mapped_column(String(HASH_LEN))


class AuditCheckpointRow(Base):
    """A signed statement that a tenant's chain had ``head_hash`` at ``seq``."""

    __tablename__ = "audit_checkpoints"
    __table_args__ = (Index("ix_audit_checkpoints_tenant", "tenant", "seq"), NO_ID_REUSE)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    tenant: Mapped[str] = mapped_column(String(TENANT_LEN))
    seq: Mapped[int] = mapped_column(BigInteger)
    head_hash: Mapped[str] = mapped_column(String(HASH_LEN))
    signed_at: Mapped[str] = mapped_column(String(32))
    key_id: Mapped[str] = mapped_column(String(64))
    signature: Mapped[str] = mapped_column(String(SIGNATURE_LEN))


class AuditOutboxRow(Base):
    """An event waiting to be shipped to the audit service by its service's shipper.
    Written in the transaction of the change it describes; deleted once acknowledged.

    A row the audit service refuses for what it holds (or that cannot be encoded at all)
    is set aside, not deleted: ``quarantined_at`` and ``refusal`` say when and why, the
    shipper passes over it, and the metrics count it until an operator deals with it."""

    __tablename__ = "audit_outbox"
    __table_args__ = (Index("ix_audit_outbox_service", "service", "id"), NO_ID_REUSE)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    service: Mapped[str] = mapped_column(String(32))
    event_json: Mapped[str] = mapped_column(Text)
    created_at: Mapped[float] = mapped_column(Float)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    quarantined_at: Mapped[float | None] = mapped_column(Float, nullable=True, default=None)
    refusal: Mapped[str | None] = mapped_column(Text, nullable=True, default=None)
