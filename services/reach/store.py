"""The reach tables' only reader and writer: reservation, the work queue, state changes.

Three rules hold everything together:

- Reserve before execute. A task's actions are inserted in one transaction under a unique
  (tenant, idempotency key) index; a duplicate — sequential or concurrent, from any process —
  finds the existing rows instead of making new ones.
- Every worker write is fenced by its lease. ``claim`` stamps due rows with a fresh lease
  token in a single UPDATE (with ``FOR UPDATE SKIP LOCKED`` on PostgreSQL), and ``settle``
  only changes a row that still carries that token, so a worker that lost its lease (it
  stalled past the lease, another took over) cannot overwrite newer news.
- One transaction per change: the action row, its history entry, its receipt, the
  consequences for dependent actions, the task's state and version, and any alert.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import secrets
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, cast

from sqlalchemy import Table, exists, func, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from services.audit_client import outbox
from services.common import errors
from services.common.pii import Masker
from services.common.timefmt import rfc3339
from services.reach import states as st
from services.storage.clock import db_clock, locked_with_clock
from services.storage.models import utcnow
from services.storage.reach_models import (
    ReachActionRow,
    ReachAlertRow,
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
    """Plain rows for ``services.reach.health``: (channel, state, count) now; (channel,
    created_at, finished_at) of actions finished in the window; (channel, at, to_state,
    reason) of state changes in the window."""

    current: list[tuple[str, str, int]]
    finished: list[tuple[str, dt.datetime, dt.datetime]]
    changes: list[tuple[str, dt.datetime, str, str]]


class ReachStore:
    """``masker`` given: every state change of an action also leaves an audit event in the
    outbox, in the same transaction (the article's five fields: caller, idempotency key,
    parameters, result, duration)."""

    def __init__(self, sessions: sessionmaker[Session], masker: Masker | None = None) -> None:
        self._sessions = sessions
        self._masker = masker

    def clock(self) -> float:
        """The database's clock now (``services.storage.clock``), for the idempotency
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
                    now = db_clock(session)
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
                return Reserved(task, self._actions_of(session, task.task_id), True)
        candidates = {a.name: (a.idem_key, *a.earlier_keys) for a in plan.actions}
        keys = [key for texts in candidates.values() for key in texts]
        held = session.scalars(
            select(ReachActionRow).where(
                ReachActionRow.tenant == plan.tenant, ReachActionRow.idem_key.in_(keys)
            )
        ).all()
        if not held:
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
                assert task is not None
                return Reserved(task, actions, True)
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

    def _insert(self, session: Session, plan: TaskPlan, due: float) -> Reserved:
        now = utcnow()
        task = ReachTaskRow(
            task_id=new_id(),
            tenant=plan.tenant,
            entity_id=plan.entity_id,
            caller_key=plan.caller_key,
            request_digest=plan.request_digest,
            logical_time=plan.logical_time,
            trace_id=plan.trace_id,
            submitted_by=plan.submitted_by,
            state=st.TASK_PENDING,
            version=1,
            created_at=now,
            updated_at=now,
        )
        actions = [
            ReachActionRow(
                action_id=new_id(),
                task_id=task.task_id,
                tenant=plan.tenant,
                position=i,
                name=a.name,
                channel=a.channel,
                action_type=a.action_type,
                params_json=json.dumps(a.params, ensure_ascii=False, sort_keys=True),
                depends_on_json=json.dumps(list(a.depends_on)),
                required=a.required,
                idem_key=a.idem_key,
                window=a.window,
                state=st.BLOCKED if a.depends_on else st.READY,
                lease_owner="",
                created_at=now,
                updated_at=now,
            )
            for i, a in enumerate(plan.actions)
        ]
        for row in actions:
            row.next_at = None if row.state == st.BLOCKED else due
        session.add(task)
        session.flush()  # the task row first: actions reference it
        session.add_all(actions)
        session.flush()
        for row in actions:
            _history(session, row, "", row.state, "reserved", {}, now)
        return Reserved(task, actions, False)

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
            select(ReachTaskRow.task_id).where(
                ReachTaskRow.task_id == task_id, ReachTaskRow.tenant == tenant
            )
        )
        return found[0] if found else None

    def task_version(self, tenant: str, task_id: str) -> tuple[int, str] | None:
        with self._sessions() as session:
            row = session.execute(
                select(ReachTaskRow.version, ReachTaskRow.state).where(
                    ReachTaskRow.task_id == task_id, ReachTaskRow.tenant == tenant
                )
            ).first()
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
        could show a task still running next to actions that all finished)."""
        page = task_ids.subquery()
        with self._sessions() as session:
            rows = session.execute(
                select(ReachTaskRow, ReachActionRow)
                .join(ReachActionRow, ReachActionRow.task_id == ReachTaskRow.task_id)
                .where(ReachTaskRow.task_id.in_(select(page.c.task_id)))
                .order_by(ReachTaskRow.task_id.desc(), ReachActionRow.position)
            ).all()
        found: dict[str, tuple[ReachTaskRow, list[ReachActionRow]]] = {}
        for task, action in rows:
            found.setdefault(task.task_id, (task, []))[1].append(action)
        return list(found.values())

    def task_of_action(self, tenant: str, action_id: str) -> str | None:
        """The task id of the tenant's action, in one short read (None: no such action)."""
        with self._sessions() as session:
            return session.scalar(
                select(ReachActionRow.task_id).where(
                    ReachActionRow.action_id == action_id, ReachActionRow.tenant == tenant
                )
            )

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
        self, worker: str, limit: int, max_attempts: int, hold_s: float
    ) -> list[ReachAlertRow]:
        """Takes up to ``limit`` undelivered alerts for ``hold_s`` seconds (database clock)
        so that one worker delivers each; a claim whose worker died runs out and the alert
        is taken up again (an alert may then arrive twice, never not at all)."""
        with self._sessions.begin() as session:
            now = db_clock(session)
            free = (
                select(ReachAlertRow.id)
                .where(
                    ReachAlertRow.delivered.is_(False),
                    ReachAlertRow.delivery_attempts < max_attempts,
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

    # --- the work queue --------------------------------------------------------------------

    def claim(self, worker: str, limit: int, lease_s: float) -> list[Claim]:
        """Takes up to ``limit`` due actions under a new lease and returns them. Due and
        expired are judged by the database's clock, so every worker agrees on them."""
        lease = lease_token(worker)
        with self._sessions.begin() as session:
            now = db_clock(session)
            mono = time.monotonic()
            due = (
                select(ReachActionRow.action_id)
                .where(ReachActionRow.state.in_(st.DUE_STATES), ReachActionRow.next_at <= now)
                .order_by(ReachActionRow.next_at)
                .limit(limit)
                .with_for_update(skip_locked=True)
            )
            result = session.execute(
                update(ReachActionRow)
                .where(ReachActionRow.action_id.in_(due.scalar_subquery()))
                .values(lease_owner=lease, next_at=now + lease_s)
                .execution_options(synchronize_session=False)
            )
            if not result.rowcount:  # type: ignore[attr-defined]
                return []
            rows = session.execute(
                select(ReachActionRow, ReachTaskRow.entity_id, ReachTaskRow.trace_id)
                .join(ReachTaskRow, ReachTaskRow.task_id == ReachActionRow.task_id)
                .where(ReachActionRow.lease_owner == lease)
            ).all()
            return [_claim(row, entity, trace, lease, now, mono) for row, entity, trace in rows]

    def settle(self, claim: Claim, change: Change) -> Settled:
        """Applies ``change`` if the worker still holds the action's lease (and, for
        ``change.live_lease``, the lease has not run out)."""
        return self._apply(
            claim.action_id,
            change,
            fence=ReachActionRow.lease_owner == claim.lease,
            tenant=None,
            task_id=claim.task_id,
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
        fence = (ReachActionRow.lease_owner == "") & ReachActionRow.state.in_(expected)
        if never_sent:
            fence = fence & (ReachActionRow.ambiguous_sends == 0)
        return self._apply(action_id, change, fence=fence, tenant=tenant)

    def record_late_confirmation(self, action_id: str, change: Change) -> Settled:
        """A receiver's confirmation that reached its worker after the lease was taken over:
        applies while the action waits to be re-sent (unleased READY) or for its outcome to
        be found (UNKNOWN, NEEDS_REVIEW, even during a look-up, whose answer it makes
        moot). Not while another worker is sending it, nor once it is decided."""
        waiting = (ReachActionRow.lease_owner == "") & (ReachActionRow.state == st.READY)
        undecided = ReachActionRow.state.in_(tuple(st.RESOLVABLE))
        return self._apply(action_id, change, fence=waiting | undecided, tenant=None)

    def _apply(
        self,
        action_id: str,
        change: Change,
        fence: Any,
        tenant: str | None,
        task_id: str | None = None,
    ) -> Settled:
        """One state change of one action, in one transaction of eight statements when the
        task holds one action: the task row locked and read (with the database's clock on
        PostgreSQL), the action's state locked, the fenced update, the task's actions read
        once (the changed one among them), the history, audit and receipt rows, and the
        task's new version. ``task_id`` is the action's task when the caller knows it (a
        worker's claim does); an action never changes task."""
        now = utcnow()
        values: dict[str, Any] = {"state": change.to_state, "updated_at": now}
        if not change.keep_lease:
            values["lease_owner"] = ""
        if change.external_id is not None:
            values["external_id"] = storable(change.external_id)[:256]
        if change.failure is not None:
            values["failure_json"] = json.dumps(change.failure, ensure_ascii=False)
            values["failure_kind"] = change.failure_kind
        if change.to_state == st.SUCCEEDED:
            values["failure_json"] = ""
            values["failure_kind"] = ""
        if change.add_attempt:
            values["attempts"] = ReachActionRow.attempts + 1
        if change.add_ambiguous:
            values["ambiguous_sends"] = ReachActionRow.ambiguous_sends + 1
        if change.add_rate_limited:
            values["rate_limited"] = ReachActionRow.rate_limited + 1
        if change.add_poll:
            values["polls"] = ReachActionRow.polls + 1
        if change.add_unknown_poll:
            values["unknown_polls"] = ReachActionRow.unknown_polls + 1
        if change.resolution is not None:
            values["resolution_json"] = json.dumps(change.resolution, ensure_ascii=False)
        if change.to_state in st.FINAL:
            values["finished_at"] = now
        with self._sessions.begin() as session:
            if task_id is None:
                task_id = session.scalar(
                    select(ReachActionRow.task_id).where(ReachActionRow.action_id == action_id)
                )
                if task_id is None:
                    return Settled(False)
            # Changes to one task run one after another: each reads its sibling actions to
            # ready dependants and derive the task's state, so two siblings settling at
            # once must not both read the other as unfinished. On PostgreSQL the task row
            # is locked first (claims lock only action rows, so the order cannot
            # deadlock); SQLite has one writer at a time anyway.
            task, clock = locked_with_clock(
                session, select(ReachTaskRow).where(ReachTaskRow.task_id == task_id)
            )
            if task is None:
                return Settled(False)
            values["next_at"] = None if change.due_in is None else clock + change.due_in
            if change.add_attempt:
                values["first_sent_at"] = func.coalesce(ReachActionRow.first_sent_at, clock)
            if change.accepted:
                values["accepted_at"] = clock
            where = [ReachActionRow.action_id == action_id, fence]
            if change.live_lease:
                where.append(ReachActionRow.next_at > clock)
            if tenant is not None:
                where.append(ReachActionRow.tenant == tenant)
            before = session.execute(
                select(ReachActionRow.state)
                .where(ReachActionRow.action_id == action_id)
                .with_for_update()
            ).scalar()
            result = session.execute(
                update(ReachActionRow)
                .where(*where)
                .values(**values)
                .execution_options(synchronize_session=False)
            )
            if not result.rowcount:  # type: ignore[attr-defined]
                return Settled(False)
            # The task's actions, read once after the update: the changed row among them.
            actions = self._actions_of(session, task_id)
            row = next(a for a in actions if a.action_id == action_id)
            assert before is not None
            if before != change.to_state or change.reason not in _QUIET_REASONS:
                _history(session, row, before, change.to_state, change.reason, change.details, now)
            if before != change.to_state or change.receipt is not None:
                duration = change.receipt.duration_ms if change.receipt is not None else 0
                self._audit(row, task, before, change.reason, duration, session)
            if change.receipt is not None:
                r = change.receipt
                session.execute(
                    insert(_RECEIPTS).values(
                        tenant=row.tenant,
                        action_id=action_id,
                        attempt=r.attempt,
                        operation=r.operation,
                        external_id=storable(r.external_id)[:256],
                        status_code=r.status_code,
                        snippet=storable(r.snippet),
                        duration_ms=r.duration_ms,
                        outcome=r.outcome,
                        created_at=now,
                    )
                )
            alerts: list[ReachAlertRow] = []
            if change.to_state == st.NEEDS_REVIEW and before != st.NEEDS_REVIEW:
                alerts.append(_alert(row, "needs_review", f"action {row.name!r} needs review", now))
            task_state = self._after_action_change(
                session, task, actions, row, before, now, alerts, clock
            )
            session.add_all(alerts)
            session.flush()
            return Settled(True, task_state, tuple(a.id for a in alerts))

    def _audit(
        self,
        row: ReachActionRow,
        task: ReachTaskRow,
        before: str,
        reason: str,
        duration_ms: int,
        session: Session,
    ) -> None:
        if self._masker is None:
            return
        fields = _action_event(row, task, before, reason, duration_ms, self._masker)
        outbox.record(session, "reach", fields)

    def _after_action_change(
        self,
        session: Session,
        task: ReachTaskRow,
        actions: list[ReachActionRow],
        changed: ReachActionRow,
        before: str,
        now: dt.datetime,
        alerts: list[ReachAlertRow],
        clock: float,
    ) -> str:
        """Unblocks or skips dependants, then re-derives the task's state and version."""
        if changed.state != before and (
            changed.state == st.SUCCEEDED or changed.state in st.DID_NOT_HAPPEN
        ):
            for action, was, reason in _propagate(session, actions, now, clock):
                self._audit(action, task, was, reason, 0, session)
        new_state = st.task_state((a.state, a.required, a.attempts) for a in actions)
        if new_state != task.state:
            if new_state == st.TASK_FAILED:
                failed = [a.name for a in actions if a.required and a.state in st.DID_NOT_HAPPEN]
                alerts.append(
                    _alert(
                        changed,
                        "task_failed",
                        f"task {task.task_id} failed: required action(s) {', '.join(failed)} "
                        "did not succeed",
                        now,
                        action_id=changed.action_id if changed.name in failed else "",
                    )
                )
            if new_state in st.TASK_FINAL and task.finished_at is None:
                task.finished_at = now
            task.state = new_state
        task.version += 1
        task.updated_at = now
        return new_state


def _action_event(
    row: ReachActionRow,
    task: ReachTaskRow,
    before: str,
    reason: str,
    duration_ms: int,
    masker: Masker,
) -> dict[str, Any]:
    """The audit event of an action's state change."""
    failure = json.loads(row.failure_json) if row.failure_json else {}
    code = failure.get("code", "") if row.state != st.SUCCEEDED else ""
    category = ""
    if code:
        name = errors.Category.Name(errors.lookup(code).category)
        category = name.removeprefix("CATEGORY_").lower()
    params = {
        "task_id": row.task_id,
        "action_id": row.action_id,
        "name": row.name,
        "channel": row.channel,
        "action_type": row.action_type,
        "entity_id": task.entity_id,
        "from_state": before,
        "reason": reason,
        "attempts": row.attempts,
        "params": json.loads(row.params_json),
    }
    return {
        "event_id": uuid.uuid4().hex,
        "time": rfc3339(utcnow()),
        "tenant": row.tenant,
        "caller_key_id": task.submitted_by,
        "service": "reach",
        "method": f"action.{row.state}",
        "idempotency_key": row.idem_key,
        "params": outbox.summarise(params, masker),
        "result_status": row.state,
        "error_code": code,
        "category": category,
        "duration_ms": duration_ms,
        "trace_id": task.trace_id,
    }


# Reasons that repeat without news (a look-up that still says pending): they update the
# row but do not add a history entry each time.
_QUIET_REASONS = frozenset({"still_pending", "rate_limit_wait"})


def _propagate(
    session: Session, actions: list[ReachActionRow], now: dt.datetime, clock: float
) -> list[tuple[ReachActionRow, str, str]]:
    """Readies actions whose dependencies all succeeded; skips, transitively, those with a
    dependency that did not happen. Returns (action, state before, reason) of each."""
    by_name = {a.name: a for a in actions}
    moved: list[tuple[ReachActionRow, str, str]] = []
    changed = True
    while changed:
        changed = False
        for action in actions:
            if action.state != st.BLOCKED:
                continue
            deps = [by_name[d] for d in json.loads(action.depends_on_json)]
            lost = [d.name for d in deps if d.state in st.DID_NOT_HAPPEN]
            if lost:
                action.state = st.SKIPPED
                action.next_at = None
                action.finished_at = now
                action.updated_at = now
                action.failure_kind = "technical"
                action.failure_json = json.dumps(
                    {
                        "code": errors.DEPENDENCY_FAILED.code,
                        "message": f"not run: {', '.join(lost)} did not succeed",
                        "data": {"dependencies": lost},
                    }
                )
                _history(
                    session,
                    action,
                    st.BLOCKED,
                    st.SKIPPED,
                    "dependency_failed",
                    {"dependencies": lost},
                    now,
                )
                moved.append((action, st.BLOCKED, "dependency_failed"))
                changed = True
            elif all(d.state == st.SUCCEEDED for d in deps):
                action.state = st.READY
                action.next_at = clock
                action.updated_at = now
                _history(session, action, st.BLOCKED, st.READY, "dependencies_succeeded", {}, now)
                moved.append((action, st.BLOCKED, "dependencies_succeeded"))
                changed = True
    return moved


def _history(
    session: Session,
    row: ReachActionRow,
    from_state: str,
    to_state: str,
    reason: str,
    details: dict[str, Any],
    now: dt.datetime,
) -> None:
    # One INSERT statement rather than an object for the unit of work: cheaper on a path
    # every state change takes.
    session.execute(
        insert(_HISTORY).values(
            tenant=row.tenant,
            action_id=row.action_id,
            at=now,
            from_state=from_state,
            to_state=to_state,
            reason=reason[:48],
            details_json=json.dumps(details, ensure_ascii=False, default=str),
        )
    )


def _alert(
    row: ReachActionRow, kind: str, message: str, now: dt.datetime, action_id: str | None = None
) -> ReachAlertRow:
    return ReachAlertRow(
        tenant=row.tenant,
        task_id=row.task_id,
        action_id=row.action_id if action_id is None else action_id,
        kind=kind,
        message=message,
        delivered=False,
        delivery_attempts=0,
        delivery_error="",
        created_at=now,
    )


def _claim(
    row: ReachActionRow, entity_id: str, trace_id: str, lease: str, now: float, mono: float
) -> Claim:
    created = row.created_at
    if created.tzinfo is None:
        created = created.replace(tzinfo=dt.UTC)
    return Claim(
        action_id=row.action_id,
        task_id=row.task_id,
        tenant=row.tenant,
        entity_id=entity_id,
        trace_id=trace_id,
        channel=row.channel,
        action_type=row.action_type,
        params=json.loads(row.params_json),
        idem_key=row.idem_key,
        state=row.state,
        attempts=row.attempts,
        rate_limited=row.rate_limited,
        unknown_polls=row.unknown_polls,
        external_id=row.external_id,
        first_sent_at=row.first_sent_at,
        accepted_at=row.accepted_at,
        created_at=created.timestamp(),
        lease=lease,
        ambiguous_sends=row.ambiguous_sends,
        db_now=now,
        mono=mono,
    )
