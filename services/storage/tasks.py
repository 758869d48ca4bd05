"""Durable ingest tasks: enqueue, claim, progress, finish, cancel, recover."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import uuid
from collections.abc import Sequence
from typing import Any, cast

from sqlalchemy import CursorResult, delete, select, update
from sqlalchemy.orm import Session, sessionmaker

from services.storage.models import TaskRow, utcnow

QUEUED, PROCESSING, COMPLETED, FAILED, CANCELLING, CANCELLED = (
    "queued",
    "processing",
    "completed",
    "failed",
    "cancelling",
    "cancelled",
)
FINISHED = (COMPLETED, FAILED, CANCELLED)


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


class TaskStore:
    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self._sessions = sessions

    def enqueue(
        self, tenant: str, tasks: Sequence[NewTask], submitted_by: str = ""
    ) -> list[TaskInfo]:
        """Stores tasks as queued, all in one transaction; returns them in order."""
        now = utcnow()
        rows = [
            TaskRow(
                task_id=new_task_id(),
                tenant=tenant,
                namespace=t.namespace,
                document_id=t.document_id,
                text=t.text,
                text_bytes=len(t.text.encode()),
                metadata_json=json.dumps(t.metadata, ensure_ascii=False),
                on_duplicate=t.on_duplicate,
                submitted_by=submitted_by,
                state=QUEUED,
                phase="",
                percent=0,
                error_code="",
                error_message="",
                error_data_json="{}",
                created_at=now,
                updated_at=now,
            )
            for t in tasks
        ]
        with self._sessions.begin() as session:
            session.add_all(rows)
        return [_info(r) for r in rows]

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

    def get(self, tenant: str, task_id: str) -> TaskInfo | None:
        with self._sessions() as session:
            row = session.scalar(
                select(TaskRow).where(TaskRow.tenant == tenant, TaskRow.task_id == task_id)
            )
            return None if row is None else _info(row)

    def claim(self, limit: int) -> list[ClaimedTask]:
        """Moves up to ``limit`` queued tasks, oldest first, to processing."""
        with self._sessions.begin() as session:
            rows = session.scalars(
                select(TaskRow)
                .where(TaskRow.state == QUEUED)
                .order_by(TaskRow.created_at, TaskRow.task_id)
                .limit(limit)
                .with_for_update(skip_locked=True)
            ).all()
            now = utcnow()
            for row in rows:
                row.state, row.phase, row.percent, row.updated_at = PROCESSING, "chunking", 10, now
            return [
                ClaimedTask(
                    r.task_id,
                    r.tenant,
                    r.namespace,
                    r.document_id,
                    r.text or "",
                    json.loads(r.metadata_json),
                    r.on_duplicate,
                    (r.error_code, r.error_message, json.loads(r.error_data_json))
                    if r.error_code
                    else None,
                )
                for r in rows
            ]

    def set_phase(self, task_ids: Sequence[str], phase: str, percent: int) -> None:
        with self._sessions.begin() as session:
            session.execute(
                update(TaskRow)
                .where(TaskRow.task_id.in_(list(task_ids)), TaskRow.state == PROCESSING)
                .values(phase=phase, percent=percent, updated_at=utcnow())
            )

    def lock_states(self, session: Session, task_ids: Sequence[str]) -> dict[str, str]:
        """The states of tasks this worker holds, locked until the caller's transaction ends,
        so a cancel cannot slip in between this read and the commit. The no-op UPDATE takes
        the write lock on SQLite (where SELECT ... FOR UPDATE does nothing) and the row
        locks on PostgreSQL."""
        ids = list(task_ids)
        session.execute(
            update(TaskRow).where(TaskRow.task_id.in_(ids)).values(updated_at=TaskRow.updated_at)
        )
        rows = session.execute(
            select(TaskRow.task_id, TaskRow.state).where(TaskRow.task_id.in_(ids))
        )
        return {task_id: state for task_id, state in rows}

    def finish(
        self,
        session: Session,
        task_ids: str | Sequence[str],
        state: str,
        *,
        error_code: str = "",
        error_message: str = "",
        error_data: dict[str, Any] | None = None,
    ) -> None:
        """Final state of one or more tasks, in the caller's transaction. The submitted text
        is dropped once the document is stored (or will never be), so tasks do not keep a
        second copy of it."""
        ids = [task_ids] if isinstance(task_ids, str) else list(task_ids)
        if not ids:
            return
        session.execute(
            update(TaskRow)
            .where(TaskRow.task_id.in_(ids))
            .values(
                state=state,
                phase="",
                percent=100 if state == COMPLETED else 0,
                error_code=error_code,
                error_message=error_message,
                error_data_json=json.dumps(error_data or {}, ensure_ascii=False),
                text=None,
                updated_at=utcnow(),
            )
        )

    def fail_unfinished(self, task_ids: Sequence[str], error_code: str, message: str) -> None:
        """Fails the tasks of a batch that broke, except those that already finished."""
        with self._sessions.begin() as session:
            session.execute(
                update(TaskRow)
                .where(TaskRow.task_id.in_(list(task_ids)), TaskRow.state.not_in(FINISHED))
                .values(
                    state=FAILED,
                    phase="",
                    percent=0,
                    error_code=error_code,
                    error_message=message,
                    error_data_json="{}",
                    text=None,
                    updated_at=utcnow(),
                )
            )

    def request_cancel(self, tenant: str, task_id: str) -> TaskInfo | None:
        """Queued -> cancelled at once; processing -> cancelling; finished: unchanged."""
        with self._sessions.begin() as session:
            row = session.scalar(
                select(TaskRow)
                .where(TaskRow.tenant == tenant, TaskRow.task_id == task_id)
                .with_for_update()
            )
            if row is None:
                return None
            if row.state == QUEUED:
                row.state, row.text, row.updated_at = CANCELLED, None, utcnow()
            elif row.state == PROCESSING:
                row.state, row.updated_at = CANCELLING, utcnow()
            return _info(row)

    def recover(self) -> int:
        """After a restart: work that was in flight is queued again (it is re-run from the
        start, which is safe because committing a document is one transaction), and cancels
        that were pending take effect. Returns how many tasks were re-queued."""
        with self._sessions.begin() as session:
            result = session.execute(
                update(TaskRow)
                .where(TaskRow.state == PROCESSING)
                .values(state=QUEUED, phase="", percent=0, updated_at=utcnow())
            )
            requeued = cast(CursorResult[Any], result).rowcount
            session.execute(
                update(TaskRow)
                .where(TaskRow.state == CANCELLING)
                .values(state=CANCELLED, phase="", text=None, updated_at=utcnow())
            )
            return requeued

    def delete_for_namespace(self, tenant: str, namespace: str) -> None:
        with self._sessions.begin() as session:
            session.execute(
                delete(TaskRow).where(TaskRow.tenant == tenant, TaskRow.namespace == namespace)
            )
