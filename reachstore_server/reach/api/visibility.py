"""Which reach tasks and actions a key may see, given its channel allow-list.

A task is visible only when every one of its actions is on a channel the key may reach;
an action only when its task is. Outside that, a task or action is answered exactly as
one that does not exist (the same status and body, after the same look-ups).

Whole tasks are hidden rather than shown without some actions: a task's state, version
and dependencies are made of all its actions, so a trimmed task would still tell that a
hidden action exists, what it is called and how it went. No key loses a task of its own
this way: SubmitTask accepts only channels the key may reach, and a key's allow-list
never changes.

These run in a worker thread (the store is blocking).
"""

from __future__ import annotations

from collections.abc import Sequence

from reachstore_server.common.auth import Caller
from reachstore_server.reach.store import ReachStore
from reachstore_server.storage.reach_models import (
    ReachActionRow,
    ReachArchivedKeyRow,
    ReachHistoryRow,
    ReachReceiptRow,
    ReachTaskRow,
)

FoundTask = tuple[ReachTaskRow, list[ReachActionRow]]
FoundAction = tuple[ReachActionRow, list[ReachReceiptRow], list[ReachHistoryRow]]


def task_visible(who: Caller, actions: Sequence[ReachActionRow]) -> bool:
    return not who.channels or all(who.may_reach(a.channel) for a in actions)


def find_task(store: ReachStore, who: Caller, task_id: str) -> FoundTask | None:
    """The caller's task, if it exists and the key may see it."""
    found = store.get_task(who.tenant, task_id)
    return found if found is not None and task_visible(who, found[1]) else None


def find_action(store: ReachStore, who: Caller, action_id: str) -> FoundAction | None:
    """The caller's action, if it exists and the key may see its task."""
    if not who.channels:
        return store.get_action(who.tenant, action_id)
    # The same two reads for a missing action as for a hidden one, so both answers cost
    # the same; the action's receipts and history are read only once it may be seen.
    task_id = store.task_of_action(who.tenant, action_id)
    task = store.get_task(who.tenant, task_id or "")
    if task_id is None or task is None or not task_visible(who, task[1]):
        return None
    return store.get_action(who.tenant, action_id)


def find_archived_action(
    store: ReachStore, who: Caller, action_id: str
) -> ReachArchivedKeyRow | None:
    """The archive's record of the caller's action, if its rows left the live tables after
    the retention and the key may see its task (every archived action of the task on a
    channel it may reach, as for a live task)."""
    rows = store.archived_task_of_action(who.tenant, action_id)
    if not rows or (who.channels and not all(who.may_reach(r.channel) for r in rows)):
        return None
    return rows[0]


def visible_actions(
    store: ReachStore, who: Caller, rows: Sequence[ReachActionRow]
) -> list[ReachActionRow]:
    """The rows (of a listing across tasks) whose tasks the key may see."""
    if not who.channels:
        return list(rows)
    shown: dict[str, bool] = {}
    for task_id in {row.task_id for row in rows}:
        task = store.get_task(who.tenant, task_id)
        shown[task_id] = task is not None and task_visible(who, task[1])
    return [row for row in rows if shown[row.task_id]]
