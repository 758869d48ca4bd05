"""The reach tables: tasks, actions, receipts, history, alerts, channel rate buckets, and the
archive of idempotency keys past their retention.

The action table is also the durable work queue: ``next_at`` (epoch seconds) says when an
action is next due — a retry of a READY action, a status look-up of a PENDING or UNKNOWN
one, the lease expiry of one being sent — and workers claim due rows under a lease.
Scheduling times are plain numbers so that SQLite and PostgreSQL compare them alike, and
they are the database's clock (``reachstore_server.reach.store.db_clock``), never a worker's: a
worker whose clock is off must not see a live lease as expired.

Every row carries ``tenant``; ``reachstore_server.reach.store`` is the only code that queries these
tables (the archive's move and look-up live in ``reachstore_server/reach/dedupe_archive.py``,
which the store calls), and every caller-facing query filters on it.
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import (
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column

from reachstore_server.storage.models import NO_ID_REUSE, TENANT_LEN, Base, BigId, utcnow

ENTITY_LEN = 128
IDEM_KEY_LEN = 512


class ReachTaskRow(Base):
    """A task: one intent of the agent, made of actions. ``caller_key`` is the caller's
    optional idempotency key for the whole task, unique per tenant (NULLs do not clash)."""

    __tablename__ = "reach_tasks"
    __table_args__ = (
        UniqueConstraint("tenant", "caller_key", name="uq_reach_tasks_caller_key"),
        Index("ix_reach_tasks_tenant_created", "tenant", "created_at"),
    )

    task_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(TENANT_LEN))
    entity_id: Mapped[str] = mapped_column(String(ENTITY_LEN))
    caller_key: Mapped[str | None] = mapped_column(String(ENTITY_LEN), nullable=True)
    # SHA-256 of the submitted task's content: a reused caller key must carry the same.
    request_digest: Mapped[str] = mapped_column(String(64))
    logical_time: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True))
    trace_id: Mapped[str] = mapped_column(String(32))
    submitted_by: Mapped[str] = mapped_column(String(32), default="")
    state: Mapped[str] = mapped_column(String(16))
    version: Mapped[int] = mapped_column(BigInteger, default=1)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    finished_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class ReachActionRow(Base):
    """An action, its idempotency key (unique per tenant: reserve-before-execute) and
    where it stands."""

    __tablename__ = "reach_actions"
    __table_args__ = (
        UniqueConstraint("tenant", "idem_key", name="uq_reach_actions_idem_key"),
        Index("ix_reach_actions_due", "state", "next_at"),
        Index("ix_reach_actions_task", "task_id", "position"),
        # The alert baselines read a week of finished actions (reach/baseline.py).
        Index("ix_reach_actions_finished", "finished_at"),
    )

    action_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    task_id: Mapped[str] = mapped_column(ForeignKey("reach_tasks.task_id", ondelete="CASCADE"))
    tenant: Mapped[str] = mapped_column(String(TENANT_LEN))
    position: Mapped[int] = mapped_column(Integer)
    name: Mapped[str] = mapped_column(String(64))
    channel: Mapped[str] = mapped_column(String(64))
    action_type: Mapped[str] = mapped_column(String(64))
    params_json: Mapped[str] = mapped_column(Text)
    depends_on_json: Mapped[str] = mapped_column(Text, default="[]")
    required: Mapped[bool] = mapped_column(Boolean, default=True)
    idem_key: Mapped[str] = mapped_column(String(IDEM_KEY_LEN))
    window: Mapped[str] = mapped_column(String(16))
    state: Mapped[str] = mapped_column(String(16))
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    rate_limited: Mapped[int] = mapped_column(Integer, default=0)
    polls: Mapped[int] = mapped_column(Integer, default=0)
    unknown_polls: Mapped[int] = mapped_column(Integer, default=0)
    # Sends whose outcome stayed unknown (a timeout after sending, a lost connection, a lost
    # lease): once there is one, the action can no longer be reported as not having happened.
    ambiguous_sends: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    next_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    lease_owner: Mapped[str] = mapped_column(String(64), default="")
    first_sent_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    accepted_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    external_id: Mapped[str] = mapped_column(String(256), default="")
    failure_json: Mapped[str] = mapped_column(Text, default="")
    failure_kind: Mapped[str] = mapped_column(String(16), default="")
    resolution_json: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    finished_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class ReachReceiptRow(Base):
    """The receiver's answer to one submit, look-up or cancel (snippet already masked)."""

    __tablename__ = "reach_receipts"
    __table_args__ = (Index("ix_reach_receipts_action", "action_id", "id"), NO_ID_REUSE)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    tenant: Mapped[str] = mapped_column(String(TENANT_LEN))
    action_id: Mapped[str] = mapped_column(
        ForeignKey("reach_actions.action_id", ondelete="CASCADE")
    )
    attempt: Mapped[int] = mapped_column(Integer)
    operation: Mapped[str] = mapped_column(String(16))
    external_id: Mapped[str] = mapped_column(String(256), default="")
    status_code: Mapped[int] = mapped_column(Integer, default=0)
    snippet: Mapped[str] = mapped_column(Text, default="")
    duration_ms: Mapped[int] = mapped_column(BigInteger, default=0)
    outcome: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class ReachHistoryRow(Base):
    """One state change of an action, with its reason."""

    __tablename__ = "reach_history"
    __table_args__ = (
        Index("ix_reach_history_action", "action_id", "id"),
        # The alert baselines and the weekly UNKNOWN review read the history by time.
        Index("ix_reach_history_at", "at"),
        NO_ID_REUSE,
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    tenant: Mapped[str] = mapped_column(String(TENANT_LEN))
    action_id: Mapped[str] = mapped_column(
        ForeignKey("reach_actions.action_id", ondelete="CASCADE")
    )
    at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    from_state: Mapped[str] = mapped_column(String(16))
    to_state: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(String(48))
    details_json: Mapped[str] = mapped_column(Text, default="{}")


class ReachAlertRow(Base):
    """A failure nobody may miss: a required action's hard failure or an escalation to
    review. Delivered through the configured alert channel, if any."""

    __tablename__ = "reach_alerts"
    __table_args__ = (
        Index("ix_reach_alerts_undelivered", "delivered", "id"),
        UniqueConstraint("tenant", "dedupe_key", name="uq_reach_alerts_dedupe_key"),
        NO_ID_REUSE,
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    tenant: Mapped[str] = mapped_column(String(TENANT_LEN))
    task_id: Mapped[str] = mapped_column(String(32))
    action_id: Mapped[str] = mapped_column(String(32), default="")
    kind: Mapped[str] = mapped_column(String(32))
    # Whose it is: ``business`` (the receiver refused the request itself) or ``technical``
    # (the way to it failed); ``engine.alert_channels`` routes each to its own channel.
    failure_kind: Mapped[str] = mapped_column(
        String(16), default="technical", server_default="technical"
    )
    message: Mapped[str] = mapped_column(Text)
    # Set on an alert that must be raised once however often its cause is seen (a channel's
    # signal past its baseline, once per channel, signal and hour); NULLs never clash.
    dedupe_key: Mapped[str | None] = mapped_column(String(200), nullable=True)
    delivered: Mapped[bool] = mapped_column(Boolean, default=False)
    delivery_attempts: Mapped[int] = mapped_column(Integer, default=0)
    delivery_error: Mapped[str] = mapped_column(Text, default="")
    # The reach worker delivering it, until when (epoch seconds by the database's clock):
    # one delivery per alert however many workers sweep.
    claim_owner: Mapped[str] = mapped_column(String(64), default="", server_default="")
    claimed_until: Mapped[float | None] = mapped_column(Float, nullable=True)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class ReachChannelBucketRow(Base):
    """A channel's send-rate token bucket, shared by every reach worker on this database
    (``reachstore_server/reach/shared_bucket.py``). ``version`` makes each update a
    compare-and-set, so that two workers never both take the last token."""

    __tablename__ = "reach_channel_buckets"

    channel: Mapped[str] = mapped_column(String(128), primary_key=True)
    tokens: Mapped[float] = mapped_column(Float)
    stamp: Mapped[float] = mapped_column(Float)  # epoch seconds of the last refill
    version: Mapped[int] = mapped_column(Integer, default=0)


class ReachArchivedKeyRow(Base):
    """An idempotency key whose task outlived the retention (``engine.dedupe_retention_days``)
    and was moved out of the live tables, still refusing a late duplicate. ``scope`` is
    ``action`` (an action's key) or ``task`` (the caller's key for the whole task). The move
    is one transaction (``reachstore_server/reach/dedupe_archive.py``): a key is always in
    exactly one of the live tables and this one. docs/AT_MOST_ONCE.md, "Dedupe records"."""

    __tablename__ = "reach_archived_keys"
    __table_args__ = (
        UniqueConstraint("tenant", "scope", "key", name="uq_reach_archived_keys_key"),
        Index("ix_reach_archived_keys_archived", "archived_at"),
        Index("ix_reach_archived_keys_action", "tenant", "action_id"),
        NO_ID_REUSE,
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    tenant: Mapped[str] = mapped_column(String(TENANT_LEN))
    scope: Mapped[str] = mapped_column(String(8))
    key: Mapped[str] = mapped_column(String(IDEM_KEY_LEN))
    task_id: Mapped[str] = mapped_column(String(32))
    action_id: Mapped[str] = mapped_column(String(32), default="")
    channel: Mapped[str] = mapped_column(String(64), default="")
    # A task key's request digest (a reuse with other content is told apart); "" for actions.
    digest: Mapped[str] = mapped_column(String(64), default="")
    # The action's (or task's) last state, so a refusal can say how it ended.
    state: Mapped[str] = mapped_column(String(16))
    finished_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    archived_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True))
