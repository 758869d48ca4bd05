"""Dedupe records past their retention: moved to an archive that still refuses duplicates.

An action's idempotency key lives on its row in ``reach_actions`` (and a task's caller key
on ``reach_tasks``); the unique index there is what makes a duplicate find the first
reservation (``reachstore_server/reach/store.py``). Kept for ever, those tables only grow;
dropped, a duplicate that arrives late (a replay of an old queue, a caller's retry after
an outage) would be sent again. So once every action of a task has finished and the
retention (``engine.dedupe_retention_days``, 90 days by default: longer than the longest
retry chain plus the longest manual handling, docs/AT_MOST_ONCE.md) has passed, the task's
keys move to ``reach_archived_keys`` and its rows leave the live tables, all in one
transaction: a key is in exactly one of the two places at every moment, never in neither.

Reservation reads the live tables first and the archive second (``refusal``): a move that
commits between the two reads is seen by the second, so a duplicate cannot slip between
them (on PostgreSQL each statement sees what was committed before it began; on SQLite the
transaction reads one snapshot). A duplicate of an archived task is refused, naming the
archived action, instead of being returned as the live task would be: its rows are gone.

Time comes from the caller (``now``): the service passes the database's clock, tests pass
any moment they like.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Sequence
from typing import Any, cast

from sqlalchemy import Connection, Table, delete, exists, insert, or_, select

from reachstore_server.common import errors
from reachstore_server.reach import states as st
from reachstore_server.storage.reach_models import (
    ReachActionRow,
    ReachArchivedKeyRow,
    ReachHistoryRow,
    ReachReceiptRow,
    ReachTaskRow,
)

DEFAULT_RETENTION_DAYS = 90
# At least two weeks: the weekly UNKNOWN review (``reachstore reach unknowns --since 7d``)
# reads the live rows of the last 7 days, and a missed week must still find them.
MIN_RETENTION_DAYS = 14
MAX_RETENTION_DAYS = 3650
# Tasks one transaction moves at most: a short transaction holds its locks briefly.
BATCH = 200

ACTION_SCOPE = "action"
TASK_SCOPE = "task"

_TASKS = cast(Table, ReachTaskRow.__table__)
_ACTIONS = cast(Table, ReachActionRow.__table__)
_RECEIPTS = cast(Table, ReachReceiptRow.__table__)
_HISTORY = cast(Table, ReachHistoryRow.__table__)
_ARCHIVE = cast(Table, ReachArchivedKeyRow.__table__)


@dataclasses.dataclass(frozen=True)
class Moved:
    """What one ``move_expired`` call did: tasks and action keys moved to the archive."""

    tasks: int
    actions: int


def move_expired(
    conn: Connection, now: dt.datetime, retention_days: int, postgres: bool, limit: int = BATCH
) -> Moved:
    """Moves up to ``limit`` tasks whose actions all finished more than ``retention_days``
    before ``now`` to the archive, inside the caller's transaction on ``conn`` (the caller
    commits: everything or nothing). On PostgreSQL the tasks are locked and ones another
    process holds are skipped, so two replicas archiving at once do not wait on each other."""
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    cutoff = now.astimezone(dt.UTC) - dt.timedelta(days=retention_days)
    still_open = (
        select(_ACTIONS.c.action_id)
        .where(
            _ACTIONS.c.task_id == _TASKS.c.task_id,
            or_(
                _ACTIONS.c.state.not_in(sorted(st.FINAL)),
                _ACTIONS.c.finished_at.is_(None),
                _ACTIONS.c.finished_at > cutoff,
            ),
        )
        .correlate(_TASKS)
    )
    due = (
        select(_TASKS.c.task_id, _TASKS.c.tenant, _TASKS.c.caller_key, _TASKS.c.request_digest)
        .add_columns(_TASKS.c.state, _TASKS.c.finished_at)
        .where(
            _TASKS.c.state.in_(sorted(st.TASK_FINAL)),
            _TASKS.c.updated_at <= cutoff,
            ~exists(still_open),
        )
        .order_by(_TASKS.c.updated_at, _TASKS.c.task_id)
        .limit(limit)
    )
    if postgres:
        due = due.with_for_update(of=_TASKS, skip_locked=True)
    tasks = conn.execute(due).all()
    if not tasks:
        return Moved(0, 0)
    task_ids = [t.task_id for t in tasks]
    actions = conn.execute(
        select(
            _ACTIONS.c.action_id,
            _ACTIONS.c.task_id,
            _ACTIONS.c.tenant,
            _ACTIONS.c.idem_key,
            _ACTIONS.c.channel,
            _ACTIONS.c.state,
            _ACTIONS.c.finished_at,
        ).where(_ACTIONS.c.task_id.in_(task_ids))
    ).all()
    archived_at = now.astimezone(dt.UTC)
    rows: list[dict[str, Any]] = [
        {
            "tenant": a.tenant,
            "scope": ACTION_SCOPE,
            "key": a.idem_key,
            "task_id": a.task_id,
            "action_id": a.action_id,
            "channel": a.channel,
            "digest": "",
            "state": a.state,
            "finished_at": a.finished_at,
            "archived_at": archived_at,
        }
        for a in actions
    ]
    rows += [
        {
            "tenant": t.tenant,
            "scope": TASK_SCOPE,
            "key": t.caller_key,
            "task_id": t.task_id,
            "action_id": "",
            "channel": "",
            "digest": t.request_digest,
            "state": t.state,
            "finished_at": t.finished_at,
            "archived_at": archived_at,
        }
        for t in tasks
        if t.caller_key is not None
    ]
    if rows:
        conn.execute(insert(_ARCHIVE), rows)
    action_ids = [a.action_id for a in actions]
    # Children first: SQLite enforces the foreign keys' cascades only when asked to.
    if action_ids:
        conn.execute(delete(_RECEIPTS).where(_RECEIPTS.c.action_id.in_(action_ids)))
        conn.execute(delete(_HISTORY).where(_HISTORY.c.action_id.in_(action_ids)))
        conn.execute(delete(_ACTIONS).where(_ACTIONS.c.action_id.in_(action_ids)))
    conn.execute(delete(_TASKS).where(_TASKS.c.task_id.in_(task_ids)))
    return Moved(len(tasks), len(actions))


def refusal(
    conn: Connection,
    tenant: str,
    caller_key: str | None,
    request_digest: str,
    action_keys: Sequence[tuple[str, Sequence[str]]],
) -> errors.ReachstoreError | None:
    """The error that refuses a reservation some of whose keys are archived, or None.

    ``action_keys``: each planned action's name and the key texts it may be stored under.
    Read after the live tables (see the module docstring)."""
    wanted = [key for _, texts in action_keys for key in texts]
    clauses = [(_ARCHIVE.c.scope == ACTION_SCOPE) & _ARCHIVE.c.key.in_(wanted)]
    if caller_key is not None:
        clauses.append((_ARCHIVE.c.scope == TASK_SCOPE) & (_ARCHIVE.c.key == caller_key))
    found = conn.execute(
        select(
            _ARCHIVE.c.scope,
            _ARCHIVE.c.key,
            _ARCHIVE.c.task_id,
            _ARCHIVE.c.action_id,
            _ARCHIVE.c.digest,
            _ARCHIVE.c.state,
            _ARCHIVE.c.archived_at,
        ).where(_ARCHIVE.c.tenant == tenant, or_(*clauses))
    ).all()
    if not found:
        return None
    task = next((row for row in found if row.scope == TASK_SCOPE), None)
    if task is not None and task.digest != request_digest:
        return errors.ReachstoreError(
            errors.IDEMPOTENCY_KEY_REUSED,
            "idempotency_key: already used for a task with different content (archived)",
            field="idempotency_key",
            structured_data={"task_id": task.task_id, "archived": True},
        )
    by_key = {row.key: row for row in found if row.scope == ACTION_SCOPE}
    taken = []
    for name, texts in action_keys:
        row = next((by_key[k] for k in texts if k in by_key), None)
        if row is not None:
            taken.append(
                {
                    "name": name,
                    "idempotency_key": texts[0],
                    "reserved_action_id": row.action_id,
                    "reserved_task_id": row.task_id,
                    "archived": True,
                    "final_state": row.state,
                }
            )
    return errors.ReachstoreError(
        errors.ACTION_ALREADY_RESERVED,
        f"{max(len(taken), 1)} action(s) of this task were reserved before, finished, and "
        "passed the dedupe retention; their keys are archived and will not run again",
        structured_data={
            "archived": True,
            "task_id": found[0].task_id,
            "actions": taken,
        },
    )
