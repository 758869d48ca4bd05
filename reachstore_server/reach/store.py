"""The reach tables' only reader and writer: reservation, the work queue, state changes.

Three rules hold everything together:

- Reserve before execute. A task's actions are inserted in one transaction under a unique
  (tenant, idempotency key) index; a duplicate — sequential or concurrent, from any process —
  finds the existing rows instead of making new ones.
- Every worker write is fenced by its lease. ``claim`` stamps due rows with a fresh lease
  token in a single UPDATE (with ``FOR UPDATE SKIP LOCKED`` on PostgreSQL), and ``settle``
  only changes a row that still carries that token, so a worker that lost its lease (it
  stalled past the lease, another took over) cannot overwrite newer news.
- A change is whole or not at all: the action row, its history entry, its receipt, its
  audit event, the consequences for dependent actions, the task's state and version, and
  any alert commit together. Several actions' changes may share that transaction
  (``settle_many``: the executor's group commit), each fenced on its own.

The hot path (claims, state changes, the reservation's inserts, the long-poll reads) is
SQLAlchemy Core on plain connections, not the ORM's unit of work, which cost most of a
state change's time (README, "Reach: actions end to end").
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import secrets
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

from sqlalchemy import (
    Connection,
    Engine,
    Float,
    Table,
    bindparam,
    column,
    exists,
    func,
    insert,
    select,
    text,
    update,
)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from reachstore_server.audit_client import outbox
from reachstore_server.common import errors
from reachstore_server.common.pii import Masker
from reachstore_server.common.timefmt import rfc3339
from reachstore_server.reach import baseline, dedupe_archive, unknown_review
from reachstore_server.reach import states as st
from reachstore_server.storage.audit_models import AuditOutboxRow
from reachstore_server.storage.clock import db_clock, machine_clock, pg_clock
from reachstore_server.storage.engine import single_statement_reads
from reachstore_server.storage.models import utcnow
from reachstore_server.storage.reach_models import (
    ReachActionRow,
    ReachAlertRow,
    ReachArchivedKeyRow,
    ReachHistoryRow,
    ReachReceiptRow,
    ReachTaskRow,
)

_HISTORY = cast(Table, ReachHistoryRow.__table__)
_RECEIPTS = cast(Table, ReachReceiptRow.__table__)


def lease_token(worker: str) -> str:
    """A fresh lease for ``worker``: its name (cut to fit) and 16 random hex digits, so
    the randomness that tells one claim from another always survives (the column holds 64
    characters)."""
    return f"{worker[:47]}:{secrets.token_hex(8)}"


def storable(text: str) -> str:
    """``text`` as PostgreSQL's text can hold it: a receiver's answer may carry NUL
    characters, and a receipt that cannot be written would lose the answer."""
    return text.replace("\x00", "\ufffd")


def new_id() -> str:
    """32 hex characters that sort by creation time (milliseconds, then randomness), so
    listing newest first is an index scan and page tokens are plain ids."""
    return f"{int(time.time() * 1000):012x}{secrets.token_hex(10)}"


@dataclasses.dataclass(frozen=True)
class ActionPlan:
    name: str
    channel: str
    action_type: str
    params: dict[str, Any]
    depends_on: tuple[str, ...]
    required: bool
    idem_key: str
    window: str
    # Keys an earlier reservation of the same intent may be stored under (made under a
    # previous key secret, or in the legacy form): looked up, never stored.
    earlier_keys: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class TaskPlan:
    """A validated task, ready to be reserved."""

    tenant: str
    entity_id: str
    caller_key: str | None
    request_digest: str
    logical_time: dt.datetime
    trace_id: str
    submitted_by: str
    actions: tuple[ActionPlan, ...]


@dataclasses.dataclass(frozen=True)
class Claim:
    """A due action held by one worker under ``lease``."""

    action_id: str
    task_id: str
    tenant: str
    entity_id: str
    trace_id: str
    channel: str
    action_type: str
    params: dict[str, Any]
    idem_key: str
    state: str
    attempts: int
    rate_limited: int
    unknown_polls: int
    external_id: str
    first_sent_at: float | None
    accepted_at: float | None
    created_at: float
    lease: str
    ambiguous_sends: int = 0
    db_now: float = 0.0  # the database's clock when the claim was made
    mono: float = 0.0  # this process's monotonic clock at the same moment

    def now(self) -> float:
        """The database's clock now, as well as this worker can tell without asking: the
        claim's reading plus the monotonic time since (immune to a skewed wall clock)."""
        return self.db_now + time.monotonic() - self.mono


@dataclasses.dataclass(frozen=True)
class Receipt:
    attempt: int
    operation: str  # submit | poll | cancel
    outcome: str
    external_id: str = ""
    status_code: int = 0
    snippet: str = ""  # masked and bounded by the caller
    duration_ms: int = 0


@dataclasses.dataclass
class Change:
    """What a worker (or an operator) learnt about an action."""

    to_state: str
    reason: str
    details: dict[str, Any] = dataclasses.field(default_factory=dict)
    # Due again this many seconds from now by the database's clock; None: not due.
    due_in: float | None = None
    external_id: str | None = None
    failure: dict[str, Any] | None = None  # code, message, retry_after_ms, data
    failure_kind: str = ""
    receipt: Receipt | None = None
    add_attempt: bool = False
    add_rate_limited: bool = False
    add_poll: bool = False
    add_unknown_poll: bool = False
    add_ambiguous: bool = False  # this send's outcome is unknown (it may have arrived)
    accepted: bool = False  # the receiver accepted it now: PENDING's stall clock starts
    resolution: dict[str, Any] | None = None
    keep_lease: bool = False  # the worker goes on with the action (e.g. after marking it sent)
    # Applies only while the lease has not run out by the database's clock: the mark made
    # right before a send, so that a worker paused past its lease never starts one.
    live_lease: bool = False


@dataclasses.dataclass(frozen=True)
class Reserved:
    task: ReachTaskRow
    actions: list[ReachActionRow]
    deduplicated: bool


@dataclasses.dataclass(frozen=True)
class Settled:
    """What ``settle`` did: whether the fence held, and alerts it raised."""

    applied: bool
    task_state: str = ""
    alerts: tuple[int, ...] = ()


@dataclasses.dataclass(frozen=True)
class HealthRows:
    """Plain rows for ``reachstore_server.reach.health``: (channel, state, count) now; (channel,
    created_at, finished_at) of actions finished in the window; (channel, at, to_state,
    reason) of state changes in the window."""

    current: list[tuple[str, str, int]]
    finished: list[tuple[str, dt.datetime, dt.datetime]]
    changes: list[tuple[str, dt.datetime, str, str]]


class ReachStore:
    """``masker`` given: every state change of an action also leaves an audit event in the
    outbox, in the same transaction (five fields: caller, idempotency key,
    parameters, result, duration)."""

    def __init__(self, sessions: sessionmaker[Session], masker: Masker | None = None) -> None:
        self._sessions = sessions
        self._masker = masker
        # The work queue's statements run on plain connections, without the ORM's unit of
        # work (which cost most of a state change's time): SQLAlchemy Core, one statement
        # per table per transaction.
        self._engine = cast(Engine, sessions.kw["bind"])
        self._postgres = self._engine.dialect.name == "postgresql"
        # Reads of one statement need no transaction (engine.py).
        self._reads = single_statement_reads(self._engine)

    def clock(self) -> float:
        """The database's clock now (``reachstore_server.storage.clock``), for the idempotency
        window, which every replica must read alike."""
        with self._sessions() as session:
            return db_clock(session)

    # --- reservation -----------------------------------------------------------------------

    def reserve(self, plan: TaskPlan) -> Reserved:
        """Inserts the task and its actions, or returns the identical task reserved before.

        A caller key reused with other content, or an action key held by another task, is
        a ``ReachstoreError``. Two racing reservations of the same task both return it.
        """
        return self.reserve_planned(lambda _now: plan)

    def reserve_planned(self, plan_for: Callable[[float], TaskPlan]) -> Reserved:
        """``reserve`` of the plan ``plan_for`` makes from the database's clock, read inside
        the reservation's transaction (the idempotency window is the database's: see
        ``SubmitTask``), so a submission costs one transaction, not a read of the clock and
        then the reservation."""
        for _ in range(3):
            try:
                # The look-up and the insert share one transaction: one commit per task.
                with self._sessions.begin() as session:
                    now = (
                        float(session.connection().execute(_PG_CLOCK).scalar_one())
                        if self._postgres
                        else machine_clock()
                    )
                    plan = plan_for(now)
                    found = self._existing(session, plan)
                    if found is not None:
                        return found
                    return self._insert(session, plan, now)
            except IntegrityError:
                continue  # a concurrent reservation won the unique index; read what it wrote
        # Passing contention, not a defect: the caller may try again.
        raise errors.ReachstoreError(errors.DATABASE_UNAVAILABLE, "reservation kept conflicting")

    def _existing(self, session: Session, plan: TaskPlan) -> Reserved | None:
        if plan.caller_key is not None:
            task = session.scalar(
                select(ReachTaskRow).where(
                    ReachTaskRow.tenant == plan.tenant, ReachTaskRow.caller_key == plan.caller_key
                )
            )
            if task is not None:
                if task.request_digest != plan.request_digest:
                    raise errors.ReachstoreError(
                        errors.IDEMPOTENCY_KEY_REUSED,
                        "idempotency_key: already used for a task with different content",
                        field="idempotency_key",
                        structured_data={"task_id": task.task_id},
                    )
                actions = self._actions_of(session, task.task_id)
                if actions:
                    return Reserved(task, actions, True)
                # Archived since the read above: the archive answers below.
        candidates = {a.name: (a.idem_key, *a.earlier_keys) for a in plan.actions}
        keys = [key for texts in candidates.values() for key in texts]
        # Plain rows on the session's connection: on a new task (the usual case) this read
        # finds nothing, and the ORM would cost more than the statement.
        held = (
            session.connection()
            .execute(
                select(_ACTIONS.c.action_id, _ACTIONS.c.task_id, _ACTIONS.c.idem_key).where(
                    _ACTIONS.c.tenant == plan.tenant, _ACTIONS.c.idem_key.in_(keys)
                )
            )
            .all()
        )
        if not held:
            self._refuse_if_archived(session, plan, candidates)
            return None
        by_key = {row.idem_key: row for row in held}
        # Each planned action's reservation, under whichever of its keys it is stored.
        found = {
            name: next((by_key[k] for k in texts if k in by_key), None)
            for name, texts in candidates.items()
        }
        task_ids = {row.task_id for row in held}
        if len(task_ids) == 1 and all(row is not None for row in found.values()):
            task_id = next(iter(task_ids))
            actions = self._actions_of(session, task_id)
            mine = {row.action_id for row in found.values() if row is not None}
            if mine == {a.action_id for a in actions}:
                task = session.get(ReachTaskRow, task_id)
                if task is not None:
                    return Reserved(task, actions, True)
            if not actions:
                # Archived between the reads: the archive refuses it, or contention.
                self._refuse_if_archived(session, plan, candidates)
                raise errors.ReachstoreError(
                    errors.DATABASE_UNAVAILABLE, "reservation raced the dedupe archive"
                )
        taken = [(a, found[a.name]) for a in plan.actions if found[a.name] is not None]
        raise errors.ReachstoreError(
            errors.ACTION_ALREADY_RESERVED,
            f"{len(taken)} action(s) of this task were reserved before by another task",
            structured_data={
                "actions": [
                    {
                        "name": a.name,
                        "idempotency_key": a.idem_key,
                        "reserved_action_id": row.action_id,
                        "reserved_task_id": row.task_id,
                    }
                    for a, row in taken
                    if row is not None
                ]
            },
        )

    @staticmethod
    def _refuse_if_archived(
        session: Session, plan: TaskPlan, candidates: Mapping[str, Sequence[str]]
    ) -> None:
        """Raises when a key of the plan passed its retention and sits in the archive: read
        after the live tables, so a move between the reads is seen here (dedupe_archive)."""
        refused = dedupe_archive.refusal(
            session.connection(),
            plan.tenant,
            plan.caller_key,
            plan.request_digest,
            list(candidates.items()),
        )
        if refused is not None:
            raise refused

    def archive_expired(
        self, now: dt.datetime, retention_days: int, limit: int = dedupe_archive.BATCH
    ) -> dedupe_archive.Moved:
        """Moves finished tasks past the retention to the dedupe archive, one transaction
        (``reachstore_server/reach/dedupe_archive.py``). ``now``: the service passes the
        database's clock; a test, any moment. On SQLite the file's write lock is taken
        before the move reads what to move (``BEGIN IMMEDIATE``): two movers that both read
        a task before either wrote would both insert its keys, and one would fail on the
        archive's unique index (PostgreSQL's movers skip each other's locked rows)."""
        with self._engine.connect() as conn:
            if not self._postgres:
                conn.exec_driver_sql("BEGIN IMMEDIATE")
            moved = dedupe_archive.move_expired(conn, now, retention_days, self._postgres, limit)
            conn.commit()
            return moved

    def _insert(self, session: Session, plan: TaskPlan, due: float) -> Reserved:
        """The task, its actions and their first history entries: one INSERT statement per
        table (Core, executed in the session so that the call's audit event, written by
        its commit, joins them)."""
        now = utcnow()
        task = {
            "task_id": new_id(),
            "tenant": plan.tenant,
            "entity_id": plan.entity_id,
            "caller_key": plan.caller_key,
            "request_digest": plan.request_digest,
            "logical_time": plan.logical_time,
            "trace_id": plan.trace_id,
            "submitted_by": plan.submitted_by,
            "state": st.TASK_PENDING,
            "version": 1,
            "created_at": now,
            "updated_at": now,
            "finished_at": None,
        }
        actions: list[dict[str, Any]] = [
            {
                "action_id": new_id(),
                "task_id": task["task_id"],
                "tenant": plan.tenant,
                "position": i,
                "name": a.name,
                "channel": a.channel,
                "action_type": a.action_type,
                "params_json": json.dumps(a.params, ensure_ascii=False, sort_keys=True),
                "depends_on_json": json.dumps(list(a.depends_on)),
                "required": a.required,
                "idem_key": a.idem_key,
                "window": a.window,
                "state": st.BLOCKED if a.depends_on else st.READY,
                "attempts": 0,
                "rate_limited": 0,
                "polls": 0,
                "unknown_polls": 0,
                "ambiguous_sends": 0,
                "next_at": None if a.depends_on else due,
                "lease_owner": "",
                "first_sent_at": None,
                "accepted_at": None,
                "external_id": "",
                "failure_json": "",
                "failure_kind": "",
                "resolution_json": "",
                "created_at": now,
                "updated_at": now,
                "finished_at": None,
            }
            for i, a in enumerate(plan.actions)
        ]
        # The task row first (actions reference it), through the session: that marks the
        # transaction as writing, so its commit adds the call's audit event
        # (outbox.install). The rest go straight to the session's connection.
        session.execute(insert(_TASKS), [task])
        conn = session.connection()
        conn.execute(insert(_ACTIONS), actions)
        conn.execute(
            insert(_HISTORY),
            [_history_row(a, "", a["state"], "reserved", {}, now) for a in actions],
        )
        return Reserved(ReachTaskRow(**task), [ReachActionRow(**a) for a in actions], False)

    # --- reads -----------------------------------------------------------------------------

    @staticmethod
    def _actions_of(session: Session, task_id: str) -> list[ReachActionRow]:
        return list(
            session.scalars(
                select(ReachActionRow)
                .where(ReachActionRow.task_id == task_id)
                .order_by(ReachActionRow.position)
                # Rows the session holds are read again: a settle reads them after its
                # own UPDATE statement, which the session does not apply to them.
                .execution_options(populate_existing=True)
            )
        )

    def get_task(
        self, tenant: str, task_id: str
    ) -> tuple[ReachTaskRow, list[ReachActionRow]] | None:
        found = self._tasks_with_actions(
            select(_TASKS.c.task_id).where(_TASKS.c.task_id == task_id, _TASKS.c.tenant == tenant)
        )
        return found[0] if found else None

    def task_version(self, tenant: str, task_id: str) -> tuple[int, str] | None:
        with self._reads.connect() as conn:
            row = conn.execute(_TASK_VERSION, {"task_id": task_id, "tenant": tenant}).first()
            return None if row is None else (row[0], row[1])

    def list_tasks(
        self,
        tenant: str,
        state: str,
        channel: str,
        entity_id: str,
        limit: int,
        before: str | None,
    ) -> list[tuple[ReachTaskRow, list[ReachActionRow]]]:
        """Newest first; ``before`` is the last task id of the previous page."""
        stmt = select(ReachTaskRow.task_id).where(ReachTaskRow.tenant == tenant)
        if state:
            stmt = stmt.where(ReachTaskRow.state == state)
        if entity_id:
            stmt = stmt.where(ReachTaskRow.entity_id == entity_id)
        if channel:
            stmt = stmt.where(
                exists().where(
                    ReachActionRow.task_id == ReachTaskRow.task_id,
                    ReachActionRow.channel == channel,
                )
            )
        if before is not None:
            stmt = stmt.where(ReachTaskRow.task_id < before)
        return self._tasks_with_actions(stmt.order_by(ReachTaskRow.task_id.desc()).limit(limit))

    def _tasks_with_actions(self, task_ids: Any) -> list[tuple[ReachTaskRow, list[ReachActionRow]]]:
        """The tasks ``task_ids`` selects, newest first, with their actions — read in ONE
        statement, so a task and its actions always come from the same moment (two reads
        could show a task still running next to actions that all finished). Core, on a
        connection of its own: long-polls read this several times per action."""
        page = task_ids.subquery()
        with self._reads.connect() as conn:
            rows = conn.execute(
                select(*_TASK_LABELS, _ACTIONS)
                .join(_ACTIONS, _ACTIONS.c.task_id == _TASKS.c.task_id)
                .where(_TASKS.c.task_id.in_(select(page.c.task_id)))
                .order_by(_TASKS.c.task_id.desc(), _ACTIONS.c.position)
            ).all()
        found: dict[str, tuple[ReachTaskRow, list[ReachActionRow]]] = {}
        for row in rows:
            values = row._mapping
            task_id = values["t_task_id"]
            if task_id not in found:
                task = ReachTaskRow(**{key: values[f"t_{key}"] for key in _TASK_KEYS})
                found[task_id] = (task, [])
            found[task_id][1].append(ReachActionRow(**{key: values[key] for key in _ACTION_KEYS}))
        return list(found.values())

    def task_of_action(self, tenant: str, action_id: str) -> str | None:
        """The task id of the tenant's action, in one short read (None: no such action)."""
        with self._sessions() as session:
            return session.scalar(
                select(ReachActionRow.task_id).where(
                    ReachActionRow.action_id == action_id, ReachActionRow.tenant == tenant
                )
            )

    def archived_task_of_action(self, tenant: str, action_id: str) -> list[ReachArchivedKeyRow]:
        """The archived action keys of the task the tenant's archived action belonged to
        (the action's own first); empty when the action was never archived."""
        with self._sessions() as session:
            task_id = session.scalar(
                select(ReachArchivedKeyRow.task_id).where(
                    ReachArchivedKeyRow.tenant == tenant,
                    ReachArchivedKeyRow.action_id == action_id,
                )
            )
            if task_id is None:
                return []
            rows = session.scalars(
                select(ReachArchivedKeyRow).where(
                    ReachArchivedKeyRow.tenant == tenant,
                    ReachArchivedKeyRow.task_id == task_id,
                    ReachArchivedKeyRow.scope == "action",
                )
            ).all()
        return sorted(rows, key=lambda r: r.action_id != action_id)

    def get_action(
        self, tenant: str, action_id: str
    ) -> tuple[ReachActionRow, list[ReachReceiptRow], list[ReachHistoryRow]] | None:
        with self._sessions() as session:
            row = session.get(ReachActionRow, action_id)
            if row is None or row.tenant != tenant:
                return None
            receipts = list(
                session.scalars(
                    select(ReachReceiptRow)
                    .where(ReachReceiptRow.action_id == action_id)
                    .order_by(ReachReceiptRow.id)
                )
            )
            history = list(
                session.scalars(
                    select(ReachHistoryRow)
                    .where(ReachHistoryRow.action_id == action_id)
                    .order_by(ReachHistoryRow.id)
                )
            )
            return row, receipts, history

    def alerts(self, tenant: str | None = None) -> list[ReachAlertRow]:
        with self._sessions() as session:
            stmt = select(ReachAlertRow).order_by(ReachAlertRow.id)
            if tenant is not None:
                stmt = stmt.where(ReachAlertRow.tenant == tenant)
            return list(session.scalars(stmt))

    def claim_alerts(
        self,
        worker: str,
        limit: int,
        max_attempts: int,
        hold_s: float,
        failure_kinds: Sequence[str] = st.FAILURE_KINDS,
    ) -> list[ReachAlertRow]:
        """Takes up to ``limit`` undelivered alerts of ``failure_kinds`` (those with a
        channel to go to) for ``hold_s`` seconds (database clock) so that one worker
        delivers each; a claim whose worker died runs out and the alert is taken up again
        (an alert may then arrive twice, never not at all)."""
        with self._sessions.begin() as session:
            now = db_clock(session)
            free = (
                select(ReachAlertRow.id)
                .where(
                    ReachAlertRow.delivered.is_(False),
                    ReachAlertRow.delivery_attempts < max_attempts,
                    ReachAlertRow.failure_kind.in_(list(failure_kinds)),
                    (ReachAlertRow.claimed_until.is_(None)) | (ReachAlertRow.claimed_until <= now),
                )
                .order_by(ReachAlertRow.id)
                .limit(limit)
                .with_for_update(skip_locked=True)
            )
            owner = lease_token(worker)
            session.execute(
                update(ReachAlertRow)
                .where(ReachAlertRow.id.in_(free.scalar_subquery()))
                .values(claim_owner=owner, claimed_until=now + hold_s)
                .execution_options(synchronize_session=False)
            )
            return list(
                session.scalars(
                    select(ReachAlertRow)
                    .where(ReachAlertRow.claim_owner == owner)
                    .order_by(ReachAlertRow.id)
                )
            )

    def mark_alert(
        self, alert: ReachAlertRow, delivered: bool, error: str, retry_in_s: float
    ) -> bool:
        """Records a delivery attempt of a claimed alert and releases the claim; False when
        the claim had been lost (it ran out and another worker took the alert). An alert
        not delivered is due again ``retry_in_s`` from now."""
        with self._sessions.begin() as session:
            values: dict[str, Any] = {
                "delivered": delivered,
                "delivery_error": error[:500],
                "delivery_attempts": ReachAlertRow.delivery_attempts + 1,
                "claim_owner": "",
                "claimed_until": None,
            }
            if not delivered:
                values["claimed_until"] = db_clock(session) + retry_in_s
            result = session.execute(
                update(ReachAlertRow)
                .where(ReachAlertRow.id == alert.id, ReachAlertRow.claim_owner == alert.claim_owner)
                .values(**values)
            )
            return bool(result.rowcount)  # type: ignore[attr-defined]

    def count_by_state(self) -> dict[tuple[str, str], int]:
        """(channel, state) -> number of actions, for the metrics endpoint."""
        with self._sessions() as session:
            rows = session.execute(
                select(ReachActionRow.channel, ReachActionRow.state, func.count()).group_by(
                    ReachActionRow.channel, ReachActionRow.state
                )
            )
            return {(c, s): n for c, s, n in rows}

    def behind_by_channel(self) -> dict[str, float]:
        """channel -> how far behind the workers are with that channel's queue (seconds, by
        the database's clock), for channels with work waiting: the longer of how long its
        oldest due action has been due, and how long its oldest action never yet sent has
        existed. The second counts actions a worker holds while it waits for the channel's
        rate (held, they are not due) (docs/OPERATIONS.md, "Load shedding")."""
        with self._sessions() as session:
            now = db_clock(session)
            due = session.execute(
                select(ReachActionRow.channel, func.min(ReachActionRow.next_at))
                .where(ReachActionRow.state.in_(st.DUE_STATES), ReachActionRow.next_at <= now)
                .group_by(ReachActionRow.channel)
            ).all()
            unsent = session.execute(
                select(ReachActionRow.channel, func.min(ReachActionRow.created_at))
                .where(ReachActionRow.state == st.READY, ReachActionRow.attempts == 0)
                .group_by(ReachActionRow.channel)
            ).all()
        behind: dict[str, float] = {}
        for channel, oldest in due:
            if oldest is not None:
                behind[channel] = max(0.0, now - oldest)
        for channel, created in unsent:
            if created is not None:
                if created.tzinfo is None:  # SQLite hands back UTC without a zone
                    created = created.replace(tzinfo=dt.UTC)
                waited = max(0.0, now - created.timestamp())
                behind[channel] = max(behind.get(channel, 0.0), waited)
        return behind

    def list_actions(
        self,
        tenant: str,
        states: Sequence[str],
        channel: str,
        created_after: dt.datetime | None,
        created_before: dt.datetime | None,
        limit: int,
        after: str | None,
    ) -> list[ReachActionRow]:
        """Actions across tasks, oldest first (ids sort by creation time); ``after`` is the
        last action id of the previous page."""
        stmt = select(ReachActionRow).where(ReachActionRow.tenant == tenant)
        if states:
            stmt = stmt.where(ReachActionRow.state.in_(states))
        if channel:
            stmt = stmt.where(ReachActionRow.channel == channel)
        if created_after is not None:
            stmt = stmt.where(ReachActionRow.created_at >= created_after)
        if created_before is not None:
            stmt = stmt.where(ReachActionRow.created_at <= created_before)
        if after is not None:
            stmt = stmt.where(ReachActionRow.action_id > after)
        with self._sessions() as session:
            return list(session.scalars(stmt.order_by(ReachActionRow.action_id).limit(limit)))

    def health_rows(self, tenant: str, since: dt.datetime) -> HealthRows:
        """What per-channel health is computed from: the tenant's actions per state now,
        and the latencies and state changes since ``since``."""
        with self._sessions() as session:
            current = session.execute(
                select(ReachActionRow.channel, ReachActionRow.state, func.count())
                .where(ReachActionRow.tenant == tenant)
                .group_by(ReachActionRow.channel, ReachActionRow.state)
            ).all()
            finished = session.execute(
                select(
                    ReachActionRow.channel, ReachActionRow.created_at, ReachActionRow.finished_at
                ).where(ReachActionRow.tenant == tenant, ReachActionRow.finished_at >= since)
            ).all()
            changes = session.execute(
                select(
                    ReachActionRow.channel,
                    ReachHistoryRow.at,
                    ReachHistoryRow.to_state,
                    ReachHistoryRow.reason,
                )
                .join(ReachActionRow, ReachActionRow.action_id == ReachHistoryRow.action_id)
                .where(ReachHistoryRow.tenant == tenant, ReachHistoryRow.at >= since)
            ).all()
        return HealthRows(
            current=[(c, s, n) for c, s, n in current],
            finished=[(c, a, b) for c, a, b in finished if b is not None],
            changes=[(c, at, to, why) for c, at, to, why in changes],
        )

    def baseline_rows(
        self, since: dt.datetime, tenant: str | None = None
    ) -> tuple[list[baseline.Finished], list[baseline.Entered]]:
        """The actions (of ``tenant``, or of every tenant) finished since ``since``, and
        their sends and UNKNOWN entries since then: what ``reach/baseline.py`` judges."""
        finished_q = select(
            _ACTIONS.c.tenant,
            _ACTIONS.c.channel,
            _ACTIONS.c.created_at,
            _ACTIONS.c.finished_at,
            _ACTIONS.c.state,
            _ACTIONS.c.failure_kind,
        ).where(_ACTIONS.c.finished_at >= since)
        entered_q = (
            select(
                _HISTORY.c.tenant,
                _ACTIONS.c.channel,
                _HISTORY.c.at,
                _HISTORY.c.to_state,
                _HISTORY.c.action_id,
            )
            .join(_ACTIONS, _ACTIONS.c.action_id == _HISTORY.c.action_id)
            .where(_HISTORY.c.at >= since, _HISTORY.c.to_state.in_([st.SUBMITTING, st.UNKNOWN]))
        )
        if tenant is not None:
            finished_q = finished_q.where(_ACTIONS.c.tenant == tenant)
            entered_q = entered_q.where(_HISTORY.c.tenant == tenant)
        with self._reads.connect() as conn:
            finished = conn.execute(finished_q).all()
            entered = conn.execute(entered_q).all()
        return (
            [baseline.Finished(*row) for row in finished if row.finished_at is not None],
            [baseline.Entered(*row) for row in entered],
        )

    def raise_alert_once(
        self, tenant: str, kind: str, failure_kind: str, message: str, dedupe_key: str
    ) -> bool:
        """Stores an alert not tied to one task, unless one with ``dedupe_key`` was raised
        before (the unique index decides, whichever replica raises it first)."""
        row = {
            "tenant": tenant,
            "task_id": "",
            "action_id": "",
            "kind": kind,
            "failure_kind": failure_kind,
            "message": message,
            "dedupe_key": dedupe_key,
            "delivered": False,
            "delivery_attempts": 0,
            "delivery_error": "",
            "claim_owner": "",
            "claimed_until": None,
            "created_at": utcnow(),
        }
        try:
            with self._engine.begin() as conn:
                conn.execute(insert(_ALERTS), [row])
        except IntegrityError:
            return False
        return True

    def unknown_review_rows(
        self, tenant: str, since: dt.datetime, channel: str = ""
    ) -> list[unknown_review.Passed]:
        """The tenant's actions that entered UNKNOWN since ``since``, and those still
        waiting in UNKNOWN or for review whenever they entered it (the weekly read is for
        them above all), with their state now and their history
        (``reach/unknown_review.py``)."""
        with self._reads.connect() as conn:
            passed = (
                select(_HISTORY.c.action_id)
                .where(
                    _HISTORY.c.tenant == tenant,
                    _HISTORY.c.at >= since,
                    _HISTORY.c.to_state == st.UNKNOWN,
                )
                .distinct()
            )
            actions = select(
                _ACTIONS.c.action_id,
                _ACTIONS.c.task_id,
                _ACTIONS.c.name,
                _ACTIONS.c.channel,
                _ACTIONS.c.state,
                _ACTIONS.c.resolution_json,
            ).where(
                _ACTIONS.c.tenant == tenant,
                _ACTIONS.c.action_id.in_(passed) | _ACTIONS.c.state.in_(list(st.RESOLVABLE)),
            )
            if channel:
                actions = actions.where(_ACTIONS.c.channel == channel)
            rows = conn.execute(actions).all()
            history: dict[str, list[tuple[dt.datetime, str, str]]] = {}
            ids = [row.action_id for row in rows]
            for start in range(0, len(ids), 500):
                for action_id, at, to_state, reason in conn.execute(
                    select(
                        _HISTORY.c.action_id, _HISTORY.c.at, _HISTORY.c.to_state, _HISTORY.c.reason
                    )
                    .where(_HISTORY.c.action_id.in_(ids[start : start + 500]))
                    .order_by(_HISTORY.c.id)
                ):
                    history.setdefault(action_id, []).append((at, to_state, reason))
        return [
            unknown_review.Passed(
                action_id=row.action_id,
                task_id=row.task_id,
                name=row.name,
                channel=row.channel,
                state=row.state,
                resolution=json.loads(row.resolution_json) if row.resolution_json else {},
                history=history.get(row.action_id, []),
            )
            for row in rows
        ]

    # --- the work queue --------------------------------------------------------------------

    def claim(self, worker: str, limit: int, lease_s: float) -> list[Claim]:
        """Takes up to ``limit`` due actions under a new lease and returns them. Due and
        expired are judged by the database's clock, so every worker agrees on them.

        One statement on PostgreSQL (the clock, the due rows ``FOR UPDATE SKIP LOCKED``,
        their new lease and the task fields a claim carries, ``UPDATE … RETURNING``); on
        SQLite the update and a read of what it leased."""
        lease = lease_token(worker)
        with self._engine.connect() as conn:
            if self._postgres:
                rows = conn.execute(
                    _PG_CLAIM, {"lease": lease, "lease_s": lease_s, "limit": limit}
                ).all()
                mono = time.monotonic()
                conn.commit()
                return [
                    _claim(row._mapping, row.entity_id, row.trace_id, lease, row.db_now, mono)
                    for row in rows
                ]
            now = machine_clock()
            mono = time.monotonic()
            due = (
                select(_ACTIONS.c.action_id)
                .where(_ACTIONS.c.state.in_(st.DUE_STATES), _ACTIONS.c.next_at <= now)
                .order_by(_ACTIONS.c.next_at)
                .limit(limit)
            )
            result = conn.execute(
                update(_ACTIONS)
                .where(_ACTIONS.c.action_id.in_(due.scalar_subquery()))
                .values(lease_owner=lease, next_at=now + lease_s)
            )
            if not result.rowcount:
                conn.commit()
                return []
            rows = conn.execute(_SQLITE_CLAIMED, {"lease": lease}).all()
            conn.commit()
            return [
                _claim(row._mapping, row.entity_id, row.trace_id, lease, now, mono) for row in rows
            ]

    def settle(self, claim: Claim, change: Change) -> Settled:
        """Applies ``change`` if the worker still holds the action's lease (and, for
        ``change.live_lease``, the lease has not run out)."""
        return self.settle_many([(claim, change)])[0]

    def settle_many(self, changes: Sequence[tuple[Claim, Change]]) -> list[Settled]:
        """``settle`` of several workers' changes (of different actions) in ONE transaction:
        a group commit. Each change is fenced by its own lease, as ``settle`` fences it;
        the answers come in the order of ``changes``."""
        return self._apply(
            [
                _Item(claim.action_id, claim.task_id, change, _Fence(lease=claim.lease))
                for claim, change in changes
            ]
        )

    def settle_unleased(
        self,
        tenant: str,
        action_id: str,
        expected: Sequence[str],
        change: Change,
        *,
        never_sent: bool = False,
    ) -> Settled:
        """An operator's or a caller's change: applies only while the action is in one of
        ``expected`` states and no worker holds it (and, with ``never_sent``, no send of it
        may have taken effect)."""
        fence = _Fence(unleased_in=tuple(expected), never_sent=never_sent, tenant=tenant)
        return self._apply([_Item(action_id, None, change, fence)])[0]

    def record_late_confirmation(self, action_id: str, change: Change) -> Settled:
        """A receiver's confirmation that reached its worker after the lease was taken over:
        applies while the action waits to be re-sent (unleased READY) or for its outcome to
        be found (UNKNOWN, NEEDS_REVIEW, even during a look-up, whose answer it makes
        moot). Not while another worker is sending it, nor once it is decided."""
        fence = _Fence(unleased_in=(st.READY,), undecided=True)
        return self._apply([_Item(action_id, None, change, fence)])[0]

    def _apply(self, items: Sequence[_Item]) -> list[Settled]:
        """State changes of actions, in one transaction of a fixed number of statements
        however many changes it carries: the tasks concerned locked and read (with the
        database's clock on PostgreSQL; SQLite takes its write lock first), their actions
        locked and read, then every fence checked and every consequence worked out here —
        dependants readied or skipped, each task's state and version — and written back
        with one statement per table: the actions' updates, the history, the receipts,
        the audit events (one multi-row INSERT into the outbox), the tasks' updates.

        Changes to one task run one after another: each reads its sibling actions to ready
        dependants and derive the task's state, so two siblings settling at once must not
        both read the other as unfinished. On PostgreSQL the task rows are locked first, in
        the order of their ids, then their actions (claims lock only action rows and wait
        for nothing, so the order cannot deadlock); SQLite has one writer at a time, taken
        at the start (``BEGIN IMMEDIATE``), so nothing changes between the read and the
        writes."""
        with self._engine.connect() as conn:
            if not self._postgres:
                conn.exec_driver_sql("BEGIN IMMEDIATE")
            results = self._apply_in(conn, items)
            conn.commit()
            return results

    def _apply_in(self, conn: Connection, items: Sequence[_Item]) -> list[Settled]:
        unknown = [item.action_id for item in items if item.task_id is None]
        task_of: dict[str, str] = {}
        if unknown:
            task_of = {
                a: t
                for a, t in conn.execute(
                    select(_ACTIONS.c.action_id, _ACTIONS.c.task_id).where(
                        _ACTIONS.c.action_id.in_(unknown)
                    )
                )
            }
        task_ids = sorted(
            {tid for item in items if (tid := item.task_id or task_of.get(item.action_id))}
        )
        if not task_ids:
            return [Settled(False) for _ in items]
        found: Sequence[Any]
        if self._postgres:
            found = conn.execute(_PG_LOCK_TASKS, {"ids": task_ids}).all()
            clock = max((row.db_now for row in found), default=0.0)
        else:
            found = conn.execute(_LOCK_TASKS, {"ids": task_ids}).all()
            clock = machine_clock()
        tasks = {row.task_id: dict(row._mapping) for row in found}
        if not tasks:
            return [Settled(False) for _ in items]
        siblings: dict[str, list[dict[str, Any]]] = {}
        rows: dict[str, dict[str, Any]] = {}
        for row in conn.execute(_LOCK_ACTIONS, {"ids": list(tasks)}):
            action = dict(row._mapping)
            rows[action["action_id"]] = action
            siblings.setdefault(action["task_id"], []).append(action)
        originals = {a: (r["state"], r["lease_owner"]) for a, r in rows.items()}
        batch = _Batch(utcnow(), clock, self._masker)
        results = [batch.change(item, rows.get(item.action_id), tasks, siblings) for item in items]
        if batch.actions:
            updated = conn.execute(
                _UPDATE_ACTION,
                [
                    {
                        "b_action_id": a,
                        "b_state": originals[a][0],
                        "b_lease": originals[a][1],
                        **{name: rows[a][name] for name in _MUTABLE},
                    }
                    for a in batch.actions
                ],
            )
            if updated.rowcount != len(batch.actions) and conn.dialect.supports_sane_multi_rowcount:
                # Cannot happen under the locks taken above; if it does, nothing is written.
                raise RuntimeError(
                    f"{len(batch.actions) - updated.rowcount} action row(s) changed under a lock"
                )
        if batch.history:
            conn.execute(insert(_HISTORY), batch.history)
        if batch.receipts:
            conn.execute(insert(_RECEIPTS), batch.receipts)
        if batch.events:
            conn.execute(insert(_OUTBOX), batch.events)
        for index, values in batch.alerts:
            inserted = conn.execute(insert(_ALERTS).values(**values)).inserted_primary_key
            assert inserted is not None
            new_id = inserted[0]
            results[index] = dataclasses.replace(
                results[index], alerts=(*results[index].alerts, int(new_id))
            )
        if batch.tasks:
            conn.execute(
                _UPDATE_TASK,
                [
                    {"b_task_id": t, **{name: tasks[t][name] for name in _TASK_MUTABLE}}
                    for t in batch.tasks
                ],
            )
        return results


_ACTIONS = cast(Table, ReachActionRow.__table__)
_TASKS = cast(Table, ReachTaskRow.__table__)
_ALERTS = cast(Table, ReachAlertRow.__table__)
_OUTBOX = cast(Table, AuditOutboxRow.__table__)

# What a state change may write of an action row: written whole, from the row as read
# under its lock and changed here, by one statement for every action of a batch.
_MUTABLE = (
    "state",
    "lease_owner",
    "next_at",
    "external_id",
    "failure_json",
    "failure_kind",
    "attempts",
    "ambiguous_sends",
    "rate_limited",
    "polls",
    "unknown_polls",
    "resolution_json",
    "first_sent_at",
    "accepted_at",
    "updated_at",
    "finished_at",
)
_TASK_KEYS = tuple(c.key for c in _TASKS.c)
_ACTION_KEYS = tuple(c.key for c in _ACTIONS.c)
# The task's columns under names of their own, next to the action's in one joined read.
_TASK_LABELS = tuple(c.label(f"t_{c.key}") for c in _TASKS.c)
_PG_CLOCK = select(pg_clock())
_TASK_VERSION = select(_TASKS.c.version, _TASKS.c.state).where(
    _TASKS.c.task_id == bindparam("task_id"), _TASKS.c.tenant == bindparam("tenant")
)
_TASK_MUTABLE = ("state", "version", "updated_at", "finished_at")
# Guarded by the state and lease read under the lock as well: a row that changed anyway
# is not overwritten (and the batch fails, see _apply_in, instead of writing blind).
_UPDATE_ACTION = update(_ACTIONS).where(
    _ACTIONS.c.action_id == bindparam("b_action_id"),
    _ACTIONS.c.state == bindparam("b_state"),
    _ACTIONS.c.lease_owner == bindparam("b_lease"),
)
_UPDATE_TASK = update(_TASKS).where(_TASKS.c.task_id == bindparam("b_task_id"))
_TASK_COLUMNS = (
    _TASKS.c.task_id,
    _TASKS.c.tenant,
    _TASKS.c.entity_id,
    _TASKS.c.trace_id,
    _TASKS.c.submitted_by,
    _TASKS.c.state,
    _TASKS.c.version,
    _TASKS.c.updated_at,
    _TASKS.c.finished_at,
)
_LOCK_TASKS = (
    select(*_TASK_COLUMNS)
    .where(_TASKS.c.task_id.in_(bindparam("ids", expanding=True)))
    .order_by(_TASKS.c.task_id)
    .with_for_update()
)
_PG_LOCK_TASKS = (
    select(*_TASK_COLUMNS, pg_clock().label("db_now"))
    .where(_TASKS.c.task_id.in_(bindparam("ids", expanding=True)))
    .order_by(_TASKS.c.task_id)
    .with_for_update()
)
_LOCK_ACTIONS = (
    select(_ACTIONS)
    .where(_ACTIONS.c.task_id.in_(bindparam("ids", expanding=True)))
    .order_by(_ACTIONS.c.task_id, _ACTIONS.c.position)
    .with_for_update()
)
_CLAIM_COLUMNS = (
    "action_id",
    "task_id",
    "tenant",
    "channel",
    "action_type",
    "params_json",
    "idem_key",
    "state",
    "attempts",
    "rate_limited",
    "unknown_polls",
    "external_id",
    "first_sent_at",
    "accepted_at",
    "created_at",
    "ambiguous_sends",
)
_DUE = ", ".join(f"'{state}'" for state in st.DUE_STATES)
# The clock is read once, in a CTE, so that "due" and the new lease's end are the same
# reading (as the two statements SQLite needs also share one).
_PG_CLAIM = text(
    f"""
    WITH clock AS MATERIALIZED (
        SELECT CAST(EXTRACT(EPOCH FROM clock_timestamp()) AS DOUBLE PRECISION) AS now
    ), due AS (
        SELECT a.action_id FROM reach_actions AS a, clock
        WHERE a.state IN ({_DUE}) AND a.next_at <= clock.now
        ORDER BY a.next_at
        LIMIT :limit
        FOR UPDATE OF a SKIP LOCKED
    )
    UPDATE reach_actions AS a
    SET lease_owner = :lease, next_at = clock.now + :lease_s
    FROM due, clock, reach_tasks AS t
    WHERE a.action_id = due.action_id AND t.task_id = a.task_id
    RETURNING {", ".join(f"a.{c}" for c in _CLAIM_COLUMNS)},
        t.entity_id, t.trace_id, clock.now AS db_now
    """
).columns(
    *(_ACTIONS.c[c] for c in _CLAIM_COLUMNS),
    _TASKS.c.entity_id,
    _TASKS.c.trace_id,
    column("db_now", Float),
)
_SQLITE_CLAIMED = (
    select(*(_ACTIONS.c[c] for c in _CLAIM_COLUMNS), _TASKS.c.entity_id, _TASKS.c.trace_id)
    .join(_TASKS, _TASKS.c.task_id == _ACTIONS.c.task_id)
    .where(_ACTIONS.c.lease_owner == bindparam("lease"))
)


@dataclasses.dataclass(frozen=True)
class _Fence:
    """What must hold of an action's row, as read under its lock, for a change to apply:
    the worker's ``lease``; or no lease and a state among ``unleased_in`` (with
    ``never_sent``: and no send that may have taken effect); or, with ``undecided``, a
    state still to be found out. ``tenant``: and the row is that tenant's."""

    lease: str | None = None
    unleased_in: tuple[str, ...] = ()
    never_sent: bool = False
    undecided: bool = False
    tenant: str | None = None

    def holds(self, row: Mapping[str, Any]) -> bool:
        if self.tenant is not None and row["tenant"] != self.tenant:
            return False
        if self.lease is not None:
            return bool(row["lease_owner"] == self.lease)
        if self.undecided and row["state"] in st.RESOLVABLE:
            return True
        return (
            row["lease_owner"] == ""
            and row["state"] in self.unleased_in
            and not (self.never_sent and row["ambiguous_sends"])
        )


@dataclasses.dataclass(frozen=True)
class _Item:
    action_id: str
    task_id: str | None  # None: looked up (an action never changes task)
    change: Change
    fence: _Fence


class _Batch:
    """The rows a batch of changes writes, worked out from the rows read under lock:
    ``change`` applies one change to them (in memory) and collects its history, receipt,
    audit events and alerts."""

    def __init__(self, now: dt.datetime, clock: float, masker: Masker | None) -> None:
        self.now = now
        self.clock = clock
        self.masker = masker
        self.actions: dict[str, None] = {}  # changed action ids, in order
        self.tasks: dict[str, None] = {}
        self.history: list[dict[str, Any]] = []
        self.receipts: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []
        self.alerts: list[tuple[int, dict[str, Any]]] = []  # (index of the change, row)
        self._index = 0

    def change(
        self,
        item: _Item,
        row: dict[str, Any] | None,
        tasks: dict[str, dict[str, Any]],
        siblings: dict[str, list[dict[str, Any]]],
    ) -> Settled:
        index, self._index = self._index, self._index + 1
        if row is None or row["task_id"] not in tasks:
            return Settled(False)
        change, clock, now = item.change, self.clock, self.now
        if not item.fence.holds(row):
            return Settled(False)
        if change.live_lease and not (row["next_at"] is not None and row["next_at"] > clock):
            return Settled(False)
        task = tasks[row["task_id"]]
        before = row["state"]
        row["state"] = change.to_state
        row["updated_at"] = now
        if not change.keep_lease:
            row["lease_owner"] = ""
        if change.external_id is not None:
            row["external_id"] = storable(change.external_id)[:256]
        if change.failure is not None:
            row["failure_json"] = json.dumps(change.failure, ensure_ascii=False)
            row["failure_kind"] = change.failure_kind
        if change.to_state == st.SUCCEEDED:
            row["failure_json"] = ""
            row["failure_kind"] = ""
        if change.add_attempt:
            row["attempts"] += 1
            if row["first_sent_at"] is None:
                row["first_sent_at"] = clock
        if change.add_ambiguous:
            row["ambiguous_sends"] += 1
        if change.add_rate_limited:
            row["rate_limited"] += 1
        if change.add_poll:
            row["polls"] += 1
        if change.add_unknown_poll:
            row["unknown_polls"] += 1
        if change.resolution is not None:
            row["resolution_json"] = json.dumps(change.resolution, ensure_ascii=False)
        if change.to_state in st.FINAL:
            row["finished_at"] = now
        row["next_at"] = None if change.due_in is None else clock + change.due_in
        if change.accepted:
            row["accepted_at"] = clock
        self.actions[row["action_id"]] = None
        if before != change.to_state or change.reason not in _QUIET_REASONS:
            self._history(row, before, change.to_state, change.reason, change.details)
        if before != change.to_state or change.receipt is not None:
            duration = change.receipt.duration_ms if change.receipt is not None else 0
            self._audit(row, task, before, change.reason, duration)
        if change.receipt is not None:
            r = change.receipt
            self.receipts.append(
                {
                    "tenant": row["tenant"],
                    "action_id": row["action_id"],
                    "attempt": r.attempt,
                    "operation": r.operation,
                    "external_id": storable(r.external_id)[:256],
                    "status_code": r.status_code,
                    "snippet": storable(r.snippet),
                    "duration_ms": r.duration_ms,
                    "outcome": r.outcome,
                    "created_at": now,
                }
            )
        if change.to_state == st.NEEDS_REVIEW and before != st.NEEDS_REVIEW:
            # Its outcome is unknown: how the send went is for operations to find out.
            message = f"action {row['name']!r} needs review"
            self.alerts.append((index, _alert(row, "needs_review", message, now, "technical")))
        actions = siblings[row["task_id"]]
        if row["state"] != before and (
            row["state"] == st.SUCCEEDED or row["state"] in st.DID_NOT_HAPPEN
        ):
            for action, was, reason in self._propagate(actions):
                self._audit(action, task, was, reason, 0)
        new_state = st.task_state((a["state"], a["required"], a["attempts"]) for a in actions)
        if new_state != task["state"]:
            if new_state == st.TASK_FAILED:
                lost = [a for a in actions if a["required"] and a["state"] in st.DID_NOT_HAPPEN]
                failed = [a["name"] for a in lost]
                # The kind of the failure that failed the task: this action's when it
                # failed (also when it was optional and its failure skipped a required
                # one: a skipped action has no kind of its own), else the first failed
                # one's.
                causes = [a for a in lost if a["state"] == st.FAILED]
                cause = row if row["state"] == st.FAILED else (causes or lost)[0]
                self.alerts.append(
                    (
                        index,
                        _alert(
                            row,
                            "task_failed",
                            f"task {task['task_id']} failed: required action(s) "
                            f"{', '.join(failed)} did not succeed",
                            now,
                            cause["failure_kind"] or "technical",
                            action_id=row["action_id"] if row["name"] in failed else "",
                        ),
                    )
                )
            if new_state in st.TASK_FINAL and task["finished_at"] is None:
                task["finished_at"] = now
            task["state"] = new_state
        elif (
            new_state == st.TASK_FAILED and row["state"] == st.FAILED != before and row["required"]
        ):
            # The task had failed already; a failure of another kind is news to another
            # owner (a refused order after a technical outage is still the business's).
            kind = row["failure_kind"] or st.TECHNICAL
            earlier = {
                a["failure_kind"] or st.TECHNICAL
                for a in actions
                if a is not row and a["required"] and a["state"] == st.FAILED
            }
            if kind not in earlier:
                message = (
                    f"task {task['task_id']} (failed already): required action "
                    f"{row['name']!r} did not succeed either"
                )
                self.alerts.append((index, _alert(row, "task_failed", message, now, kind)))
        task["version"] += 1
        task["updated_at"] = now
        self.tasks[task["task_id"]] = None
        return Settled(True, new_state)

    def _propagate(self, actions: list[dict[str, Any]]) -> list[tuple[dict[str, Any], str, str]]:
        """Readies actions whose dependencies all succeeded; skips, transitively, those with
        a dependency that did not happen. Returns (action, state before, reason) of each."""
        now = self.now
        by_name = {a["name"]: a for a in actions}
        moved: list[tuple[dict[str, Any], str, str]] = []
        changed = True
        while changed:
            changed = False
            for action in actions:
                if action["state"] != st.BLOCKED:
                    continue
                deps = [by_name[d] for d in json.loads(action["depends_on_json"])]
                lost = [d["name"] for d in deps if d["state"] in st.DID_NOT_HAPPEN]
                if lost:
                    action["state"] = st.SKIPPED
                    action["next_at"] = None
                    action["finished_at"] = now
                    action["updated_at"] = now
                    action["failure_kind"] = "technical"
                    action["failure_json"] = json.dumps(
                        {
                            "code": errors.DEPENDENCY_FAILED.code,
                            "message": f"not run: {', '.join(lost)} did not succeed",
                            "data": {"dependencies": lost},
                        }
                    )
                    self._history(
                        action, st.BLOCKED, st.SKIPPED, "dependency_failed", {"dependencies": lost}
                    )
                    moved.append((action, st.BLOCKED, "dependency_failed"))
                    changed = True
                elif all(d["state"] == st.SUCCEEDED for d in deps):
                    action["state"] = st.READY
                    action["next_at"] = self.clock
                    action["updated_at"] = now
                    self._history(action, st.BLOCKED, st.READY, "dependencies_succeeded", {})
                    moved.append((action, st.BLOCKED, "dependencies_succeeded"))
                    changed = True
                else:
                    continue
                self.actions[action["action_id"]] = None
        return moved

    def _history(
        self,
        row: Mapping[str, Any],
        from_state: str,
        to_state: str,
        reason: str,
        details: dict[str, Any],
    ) -> None:
        self.history.append(_history_row(row, from_state, to_state, reason, details, self.now))

    def _audit(
        self,
        row: Mapping[str, Any],
        task: Mapping[str, Any],
        before: str,
        reason: str,
        duration_ms: int,
    ) -> None:
        if self.masker is None:
            return
        fields = _action_event(row, task, before, reason, duration_ms, self.masker)
        # As ``outbox.record`` writes it, but one multi-row INSERT for the whole batch.
        self.events.append(
            {
                "service": "reach",
                "event_json": outbox.bounded_event(fields),
                "created_at": time.time(),
                "attempts": 0,
            }
        )


def _action_event(
    row: Mapping[str, Any],
    task: Mapping[str, Any],
    before: str,
    reason: str,
    duration_ms: int,
    masker: Masker,
) -> dict[str, Any]:
    """The audit event of an action's state change."""
    state = row["state"]
    failure = json.loads(row["failure_json"]) if row["failure_json"] else {}
    code = failure.get("code", "") if state != st.SUCCEEDED else ""
    category = ""
    if code:
        name = errors.Category.Name(errors.lookup(code).category)
        category = name.removeprefix("CATEGORY_").lower()
    params = {
        "task_id": row["task_id"],
        "action_id": row["action_id"],
        "name": row["name"],
        "channel": row["channel"],
        "action_type": row["action_type"],
        "entity_id": task["entity_id"],
        "from_state": before,
        "reason": reason,
        "attempts": row["attempts"],
        "params": json.loads(row["params_json"]),
    }
    return {
        "event_id": uuid.uuid4().hex,
        "time": rfc3339(utcnow()),
        "tenant": row["tenant"],
        "caller_key_id": task["submitted_by"],
        "service": "reach",
        "method": f"action.{state}",
        "idempotency_key": row["idem_key"],
        "params": outbox.summarise(params, masker),
        "result_status": state,
        "error_code": code,
        "category": category,
        "duration_ms": duration_ms,
        "trace_id": task["trace_id"],
    }


# Reasons that repeat without news (a look-up that still says pending): they update the
# row but do not add a history entry each time.
_QUIET_REASONS = frozenset({"still_pending", "rate_limit_wait"})


def _history_row(
    row: Mapping[str, Any],
    from_state: str,
    to_state: str,
    reason: str,
    details: dict[str, Any],
    now: dt.datetime,
) -> dict[str, Any]:
    return {
        "tenant": row["tenant"],
        "action_id": row["action_id"],
        "at": now,
        "from_state": from_state,
        "to_state": to_state,
        "reason": reason[:48],
        "details_json": json.dumps(details, ensure_ascii=False, default=str),
    }


def _alert(
    row: Mapping[str, Any],
    kind: str,
    message: str,
    now: dt.datetime,
    failure_kind: str,
    action_id: str | None = None,
) -> dict[str, Any]:
    return {
        "tenant": row["tenant"],
        "task_id": row["task_id"],
        "action_id": row["action_id"] if action_id is None else action_id,
        "kind": kind,
        "failure_kind": failure_kind,
        "message": message,
        "delivered": False,
        "delivery_attempts": 0,
        "delivery_error": "",
        "claim_owner": "",
        "claimed_until": None,
        "created_at": now,
    }


def _claim(row: Any, entity_id: str, trace_id: str, lease: str, now: float, mono: float) -> Claim:
    created = row["created_at"]
    if created.tzinfo is None:
        created = created.replace(tzinfo=dt.UTC)
    return Claim(
        action_id=row["action_id"],
        task_id=row["task_id"],
        tenant=row["tenant"],
        entity_id=entity_id,
        trace_id=trace_id,
        channel=row["channel"],
        action_type=row["action_type"],
        params=json.loads(row["params_json"]),
        idem_key=row["idem_key"],
        state=row["state"],
        attempts=row["attempts"],
        rate_limited=row["rate_limited"],
        unknown_polls=row["unknown_polls"],
        external_id=row["external_id"],
        first_sent_at=row["first_sent_at"],
        accepted_at=row["accepted_at"],
        created_at=created.timestamp(),
        lease=lease,
        ambiguous_sends=row["ambiguous_sends"],
        db_now=now,
        mono=mono,
    )
