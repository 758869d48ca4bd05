"""Durable ingest tasks: enqueue, claim, progress, finish, cancel, recover.

Any number of ingest processes share the task table, so a process works on a task only
under a lease:

- ``claim`` stamps the tasks it takes with a lease token of its own (the process's name
  and a number per claim) and an expiry, in one UPDATE (with ``FOR UPDATE SKIP LOCKED`` on
  PostgreSQL), so no two processes take the same task.
- The holder renews the lease while it works (``renew``). A lease that runs out means its
  holder died or stalled: the next ``claim`` of any process takes the task back
  (``processing``: claimed again and re-run from the start, which is safe because
  committing a document is one transaction; ``cancelling``: ended ``cancelled``).
- Every write of the holder is fenced by its token, so a process that lost a lease (it
  stalled past it and another took over) cannot store or finish that task any more.

Leases are judged by the database's clock, in SQL, never by a process's own clock, so a
process whose clock is wrong cannot take a live process's tasks or keep a dead one's.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import itertools
import json
import logging
import secrets
import uuid
from collections.abc import Sequence
from typing import Any, cast

from sqlalchemy import (
    CursorResult,
    Table,
    delete,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.sql.elements import ColumnElement

from reachstore_server.common.config import PROCESS_NAME_CHARS, process_name
from reachstore_server.storage.clock import db_clock
from reachstore_server.storage.models import TaskRow, utcnow

log = logging.getLogger(__name__)
_TASKS = cast(Table, TaskRow.__table__)

QUEUED, PROCESSING, COMPLETED, FAILED, CANCELLING, CANCELLED = (
    "queued",
    "processing",
    "completed",
    "failed",
    "cancelling",
    "cancelled",
)
FINISHED = (COMPLETED, FAILED, CANCELLED)
# The states in which a task is held under a lease.
LEASED = (PROCESSING, CANCELLING)

DEFAULT_LEASE_S = 30.0
# A lease token is the holder's name, ':', a random run id and '.', the claim's number; it
# fits the 64 characters of ``lease_owner`` with names cut to PROCESS_NAME_CHARS, so the
# first 40 characters of a name must tell live processes apart (default names do).


@dataclasses.dataclass(frozen=True)
class NewTask:
    namespace: str
    document_id: str
    text: str
    metadata: dict[str, str]
    on_duplicate: str  # "skip" | "overwrite" | "error"


@dataclasses.dataclass(frozen=True)
class TaskInfo:
    task_id: str
    tenant: str
    namespace: str
    document_id: str
    state: str
    phase: str
    percent: int
    error_code: str
    error_message: str
    error_data: dict[str, Any]
    created_at: dt.datetime
    updated_at: dt.datetime
    submitted_by: str = ""


@dataclasses.dataclass(frozen=True)
class ClaimedTask:
    """A task a worker holds, with the document it must ingest."""

    task_id: str
    tenant: str
    namespace: str
    document_id: str
    text: str
    metadata: dict[str, str]
    on_duplicate: str
    # The lease it is held under; every write about the task passes it back as the fence.
    lease: str
    # Set when the task was refused on arrival: (error code, message, data) to fail it with.
    refusal: tuple[str, str, dict[str, Any]] | None = None


def _info(row: TaskRow) -> TaskInfo:
    return TaskInfo(
        row.task_id,
        row.tenant,
        row.namespace,
        row.document_id,
        row.state,
        row.phase,
        row.percent,
        row.error_code,
        row.error_message,
        json.loads(row.error_data_json),
        row.created_at,
        row.updated_at,
        row.submitted_by,
    )


def new_task_id() -> str:
    return uuid.uuid4().hex


def db_now(session: Session, seconds_ahead: float = 0.0) -> dt.datetime:
    """The database's clock (``reachstore_server.storage.clock``), ``seconds_ahead`` in the future:
    leases are written and compared with this alone, never with a process's own clock."""
    return dt.datetime.fromtimestamp(db_clock(session) + seconds_ahead, dt.UTC)


def _aware(moment: dt.datetime) -> dt.datetime:
    """SQLite hands back the stored UTC time without its zone."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=dt.UTC)


def _lease_ended(now: dt.datetime) -> ColumnElement[bool]:
    # No expiry: held by a version that had no leases; nothing renews it.
    return TaskRow.lease_until.is_(None) | (TaskRow.lease_until < now)


def _claimable(now: dt.datetime) -> ColumnElement[bool]:
    """Queued, or processing under a lease that ran out."""
    return (TaskRow.state == QUEUED) | ((TaskRow.state == PROCESSING) & _lease_ended(now))


def _abandoned_cancel(now: dt.datetime) -> ColumnElement[bool]:
    """A cancel its holder can no longer carry out: it is ended by whoever sees it."""
    return (TaskRow.state == CANCELLING) & _lease_ended(now)


class TaskStore:
    """The task table. ``holder`` names this process in the leases it takes (default: host
    name and pid); names must differ between live processes. ``lease_s`` is how long a
    claim or a renewal holds a task."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        holder: str = "",
        lease_s: float = DEFAULT_LEASE_S,
    ) -> None:
        self._sessions = sessions
        self.lease_s = lease_s
        self._name = (holder or process_name())[:PROCESS_NAME_CHARS]
        # Tells this run's leases from those an earlier run under the same name left.
        self._run = secrets.token_hex(4)
        self._claims = itertools.count(1)

    def _new_lease(self) -> str:
        return f"{self._name}:{self._run}.{next(self._claims)}"

    def enqueue(
        self, tenant: str, tasks: Sequence[NewTask], submitted_by: str = ""
    ) -> list[TaskInfo]:
        """Stores tasks as queued, all in one transaction; returns them in order. One Core
        executemany: a batch's ORM objects cost more than its insert."""
        now = utcnow()
        ids = [new_task_id() for _ in tasks]
        rows = [
            {
                "task_id": task_id,
                "tenant": tenant,
                "namespace": t.namespace,
                "document_id": t.document_id,
                "text": t.text,
                "text_bytes": len(t.text.encode()),
                "metadata_json": json.dumps(t.metadata, ensure_ascii=False),
                "on_duplicate": t.on_duplicate,
                "submitted_by": submitted_by,
                "state": QUEUED,
                "phase": "",
                "percent": 0,
                "error_code": "",
                "error_message": "",
                "error_data_json": "{}",
                "created_at": now,
                "updated_at": now,
            }
            for task_id, t in zip(ids, tasks, strict=True)
        ]
        if rows:
            with self._sessions.begin() as session:
                session.execute(insert(_TASKS), rows)
        return [
            TaskInfo(
                task_id,
                tenant,
                t.namespace,
                t.document_id,
                QUEUED,
                "",
                0,
                "",
                "",
                {},
                now,
                now,
                submitted_by,
            )
            for task_id, t in zip(ids, tasks, strict=True)
        ]

    def enqueue_refused(
        self,
        tenant: str,
        task: NewTask,
        error_code: str,
        message: str,
        data: dict[str, Any],
        submitted_by: str = "",
    ) -> TaskInfo:
        """Queues a task that can only fail, without its text. It is queued like any other
        and the worker fails it with this error, so from outside it cannot be told apart
        from a task that failed on its own (anti-enumeration)."""
        now = utcnow()
        row = TaskRow(
            task_id=new_task_id(),
            tenant=tenant,
            namespace=task.namespace,
            document_id=task.document_id,
            text=None,
            metadata_json="{}",
            on_duplicate=task.on_duplicate,
            submitted_by=submitted_by,
            state=QUEUED,
            phase="",
            percent=0,
            error_code=error_code,
            error_message=message,
            error_data_json=json.dumps(data, ensure_ascii=False),
            created_at=now,
            updated_at=now,
        )
        with self._sessions.begin() as session:
            session.add(row)
        return _info(row)

    def queue(self) -> tuple[dict[str, int], float]:
        """Unfinished tasks of every tenant by state, and how long the oldest queued one
        has waited (seconds, by the database's clock; 0 when none waits), for metrics."""
        with self._sessions() as session:
            counts = session.execute(
                select(TaskRow.state, func.count())
                .where(TaskRow.state.not_in(FINISHED))
                .group_by(TaskRow.state)
            ).all()
            oldest = session.scalar(
                select(func.min(TaskRow.created_at)).where(TaskRow.state == QUEUED)
            )
            now = db_clock(session)
        waited = 0.0
        if oldest is not None:
            if oldest.tzinfo is None:  # SQLite hands back the stored UTC time without a zone
                oldest = oldest.replace(tzinfo=dt.UTC)
            waited = max(0.0, now - oldest.timestamp())
        return {state: int(n) for state, n in counts}, waited

    def get(self, tenant: str, task_id: str) -> TaskInfo | None:
        with self._sessions() as session:
            row = session.scalar(
                select(TaskRow).where(TaskRow.tenant == tenant, TaskRow.task_id == task_id)
            )
            return None if row is None else _info(row)

    def claim(self, limit: int) -> list[ClaimedTask]:
        """Takes up to ``limit`` tasks, oldest first, under a new lease: queued ones and
        processing ones whose lease ran out. Cancelling tasks whose lease ran out are ended
        ``cancelled`` on the way (their holder will never do it)."""
        with self._sessions.begin() as session:
            now = db_now(session)
            # Reads first, so an idle poll writes nothing (on SQLite any write, even of no
            # rows, takes the database's one write lock). Queued tasks and those of leases
            # that ran out are read apart: each read follows the (state, created_at) index
            # and stops at ``limit``, where one read of both had to sort every queued task.
            order = (TaskRow.created_at, TaskRow.task_id)
            columns = (TaskRow.task_id, TaskRow.state, TaskRow.lease_owner, *order)
            seen = list(
                session.execute(
                    select(*columns).where(TaskRow.state == QUEUED).order_by(*order).limit(limit)
                )
            )
            seen += session.execute(
                select(*columns)
                .where(TaskRow.state.in_(LEASED), _lease_ended(now))
                .order_by(*order)
                .limit(limit)
            ).all()
            if not seen:
                return []
            if any(row.state == CANCELLING for row in seen):
                session.execute(
                    update(TaskRow)
                    .where(_abandoned_cancel(now))
                    .values(
                        state=CANCELLED, phase="", text=None, lease_until=None, updated_at=utcnow()
                    )
                    .execution_options(synchronize_session=False)
                )
            wanted = sorted(
                (row for row in seen if row.state != CANCELLING),
                key=lambda row: (row.created_at, row.task_id),
            )[:limit]
            if not wanted:
                return []
            lease = self._new_lease()
            # One UPDATE stamps the rows and returns them, taking only those still
            # claimable, so two processes cannot both take one: PostgreSQL skips rows
            # another claim has locked, SQLite holds its write lock.
            due = (
                select(TaskRow.task_id)
                .where(TaskRow.task_id.in_([row.task_id for row in wanted]), _claimable(now))
                .with_for_update(skip_locked=True)
            )
            returned = session.execute(
                update(TaskRow)
                .where(TaskRow.task_id.in_(due.scalar_subquery()))
                .values(
                    state=PROCESSING,
                    phase="chunking",
                    percent=10,
                    lease_owner=lease,
                    lease_until=now + dt.timedelta(seconds=self.lease_s),
                    updated_at=utcnow(),
                )
                .returning(
                    TaskRow.task_id,
                    TaskRow.tenant,
                    TaskRow.namespace,
                    TaskRow.document_id,
                    TaskRow.text,
                    TaskRow.metadata_json,
                    TaskRow.on_duplicate,
                    TaskRow.error_code,
                    TaskRow.error_message,
                    TaskRow.error_data_json,
                    TaskRow.created_at,
                )
                .execution_options(synchronize_session=False)
            ).all()
            rows = sorted(returned, key=lambda row: (_aware(row.created_at), row.task_id))
            taken_over = {row.task_id: row.lease_owner for row in seen if row.state == PROCESSING}
            for row in rows:
                if row.task_id in taken_over:
                    log.warning(
                        "taking over task %s: the lease of %s ran out",
                        row.task_id,
                        taken_over[row.task_id] or "a process without leases",
                    )
            return [
                ClaimedTask(
                    r.task_id,
                    r.tenant,
                    r.namespace,
                    r.document_id,
                    r.text or "",
                    json.loads(r.metadata_json),
                    r.on_duplicate,
                    lease,
                    (r.error_code, r.error_message, json.loads(r.error_data_json))
                    if r.error_code
                    else None,
                )
                for r in rows
            ]

    def renew(self, lease: str) -> set[str]:
        """Extends ``lease`` from now on the database's clock. Returns the ids of the tasks
        still under it: held, or finished by its holder (a finished task keeps its last
        lease). A task of the claim missing from them was taken over by another process
        after the lease ran out, or deleted with its namespace."""
        with self._sessions.begin() as session:
            session.execute(
                update(TaskRow)
                .where(TaskRow.lease_owner == lease, TaskRow.state.in_(LEASED))
                .values(lease_until=db_now(session, self.lease_s))
                .execution_options(synchronize_session=False)
            )
            return set(session.scalars(select(TaskRow.task_id).where(TaskRow.lease_owner == lease)))

    def set_phase(self, lease: str, task_ids: Sequence[str], phase: str, percent: int) -> None:
        """Progress of tasks held under ``lease``; it renews the lease too."""
        with self._sessions.begin() as session:
            session.execute(
                update(TaskRow)
                .where(
                    TaskRow.task_id.in_(list(task_ids)),
                    TaskRow.state == PROCESSING,
                    TaskRow.lease_owner == lease,
                )
                .values(
                    phase=phase,
                    percent=percent,
                    lease_until=db_now(session, self.lease_s),
                    updated_at=utcnow(),
                )
                .execution_options(synchronize_session=False)
            )

    def lock_states(self, session: Session, lease: str, task_ids: Sequence[str]) -> dict[str, str]:
        """The states of those of ``task_ids`` still held under ``lease``, locked until the
        caller's transaction ends, so neither a cancel nor a takeover can slip in between
        this read and the commit. A task missing from the answer must not be committed:
        another process holds it now. The no-op UPDATE takes the write lock on SQLite
        (where SELECT ... FOR UPDATE does nothing) and the row locks on PostgreSQL; it
        leaves rows of other leases alone, so it never waits for another process's locks."""
        held = TaskRow.task_id.in_(list(task_ids)) & (TaskRow.lease_owner == lease)
        session.execute(
            update(TaskRow)
            .where(held)
            .values(updated_at=TaskRow.updated_at)
            .execution_options(synchronize_session=False)
        )
        rows = session.execute(select(TaskRow.task_id, TaskRow.state).where(held))
        return {task_id: state for task_id, state in rows}

    def finish(
        self,
        session: Session,
        lease: str,
        task_ids: str | Sequence[str],
        state: str,
        *,
        error_code: str = "",
        error_message: str = "",
        error_data: dict[str, Any] | None = None,
    ) -> None:
        """Final state of one or more tasks held under ``lease``, in the caller's
        transaction. The submitted text is dropped once the document is stored (or will
        never be), so tasks do not keep a second copy of it. The lease's token stays as
        the task's last holder."""
        ids = [task_ids] if isinstance(task_ids, str) else list(task_ids)
        if not ids:
            return
        session.execute(
            update(TaskRow)
            .where(TaskRow.task_id.in_(ids), TaskRow.lease_owner == lease)
            .values(
                state=state,
                phase="",
                percent=100 if state == COMPLETED else 0,
                error_code=error_code,
                error_message=error_message,
                error_data_json=json.dumps(error_data or {}, ensure_ascii=False),
                text=None,
                lease_until=None,
                updated_at=utcnow(),
            )
        )

    def fail_unfinished(
        self, lease: str, task_ids: Sequence[str], error_code: str, message: str
    ) -> None:
        """Fails the tasks of a batch that broke, except those that already finished or are
        no longer held under ``lease``."""
        with self._sessions.begin() as session:
            session.execute(
                update(TaskRow)
                .where(
                    TaskRow.task_id.in_(list(task_ids)),
                    TaskRow.state.not_in(FINISHED),
                    TaskRow.lease_owner == lease,
                )
                .values(
                    state=FAILED,
                    phase="",
                    percent=0,
                    error_code=error_code,
                    error_message=message,
                    error_data_json="{}",
                    text=None,
                    lease_until=None,
                    updated_at=utcnow(),
                )
            )

    def request_cancel(self, tenant: str, task_id: str) -> TaskInfo | None:
        """Queued -> cancelled at once; processing -> cancelling, which the task's holder
        ends ``cancelled`` at its commit (or any claim does, once its lease ran out);
        finished: unchanged.

        Each change is one UPDATE that checks the state it changes from: on SQLite a
        SELECT ... FOR UPDATE locks nothing (the transaction takes the write lock only at
        its first write), so a read-then-write let a commit land in between, and a task
        that had just reported ``completed`` ended ``cancelled`` with its document stored
        (tests/e2e/test_ingest_cancel_race.py)."""
        mine = (TaskRow.tenant == tenant) & (TaskRow.task_id == task_id)
        with self._sessions.begin() as session:
            for source, values in (
                (QUEUED, {"state": CANCELLED, "text": None}),
                (PROCESSING, {"state": CANCELLING}),
            ):
                session.execute(
                    update(TaskRow)
                    .where(mine, TaskRow.state == source)
                    .values(**values, updated_at=utcnow())
                    .execution_options(synchronize_session=False)
                )
            row = session.scalar(select(TaskRow).where(mine))
            return None if row is None else _info(row)

    def recover(self) -> int:
        """At start: tasks an earlier run of this process left under its own name (it
        stopped mid-claim or crashed) are taken back now rather than when their leases run
        out: processing ones are queued again, pending cancels take effect. Leases of any
        other name are left alone, live or not; ``claim`` takes those back once they run
        out. Returns how many tasks were re-queued."""
        earlier_run = TaskRow.lease_owner.startswith(f"{self._name}:", autoescape=True) & (
            ~TaskRow.lease_owner.startswith(f"{self._name}:{self._run}.", autoescape=True)
        )
        with self._sessions.begin() as session:
            result = session.execute(
                update(TaskRow)
                .where(TaskRow.state == PROCESSING, earlier_run)
                .values(state=QUEUED, phase="", percent=0, lease_until=None, updated_at=utcnow())
                .execution_options(synchronize_session=False)
            )
            requeued = cast(CursorResult[Any], result).rowcount
            session.execute(
                update(TaskRow)
                .where(TaskRow.state == CANCELLING, earlier_run)
                .values(state=CANCELLED, phase="", text=None, lease_until=None, updated_at=utcnow())
                .execution_options(synchronize_session=False)
            )
            return requeued

    def delete_for_namespace(self, tenant: str, namespace: str) -> None:
        with self._sessions.begin() as session:
            session.execute(
                delete(TaskRow).where(TaskRow.tenant == tenant, TaskRow.namespace == namespace)
            )
